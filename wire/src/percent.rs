//! Percent-encoding (RFC 3986) for path segments, query values and the harness's own header
//! tags: any Unicode text becomes visible ASCII and comes back unchanged.

/// Percent-encodes every byte but RFC 3986's unreserved characters (`A-Z a-z 0-9 - . _ ~`).
/// The result is visible ASCII, so it survives an HTTP header (no trimming, no control
/// characters) and a URL path segment.
pub fn percent_encode(text: &str) -> String {
    let mut encoded = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            encoded.push(char::from(byte));
        } else {
            encoded.push_str(&format!("%{byte:02X}"));
        }
    }
    encoded
}

/// Decodes `%XX` escapes; other bytes stay as they are, and bytes that are not UTF-8 after
/// decoding become U+FFFD.
pub fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut decoded = Vec::with_capacity(bytes.len());
    let mut index = 0;
    while index < bytes.len() {
        let hex = |at: usize| bytes.get(at).and_then(|byte| char::from(*byte).to_digit(16));
        match (bytes[index], hex(index + 1), hex(index + 2)) {
            (b'%', Some(high), Some(low)) => {
                // Two hex digits are at most 255.
                decoded.push(u8::try_from(high * 16 + low).unwrap_or(u8::MAX));
                index += 3;
            }
            (byte, _, _) => {
                decoded.push(byte);
                index += 1;
            }
        }
    }
    String::from_utf8_lossy(&decoded).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn any_text_survives_a_round_trip_as_visible_ascii() {
        for text in ["acme/prod", " lead and trail ", "ünïcödé/東京/🦀", "100%25 %2F", "a\u{7f}b", ""]
        {
            let encoded = percent_encode(text);
            assert!(encoded.bytes().all(|byte| byte.is_ascii_graphic()), "{encoded}");
            assert_eq!(percent_decode(&encoded), text);
        }
        assert_eq!(percent_encode("run_1-a.b~"), "run_1-a.b~");
    }

    #[test]
    fn broken_escapes_are_kept_as_text() {
        assert_eq!(percent_decode("100%"), "100%");
        assert_eq!(percent_decode("%zz%4"), "%zz%4");
        assert_eq!(percent_decode("%ff"), "\u{fffd}");
    }
}
