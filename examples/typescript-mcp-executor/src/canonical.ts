// RFC 8785, the JSON Canonicalization Scheme, for request fingerprints. The RFC defines its
// number and string forms as ECMAScript's JSON.stringify writes them, so in JavaScript only
// the key order is left to do: members sorted by their names' UTF-16 code units, which is how
// Array.prototype.sort compares strings.

/** The canonical JSON text of `value`; throws for what JSON cannot hold. */
export function canonicalJson(value: unknown): string {
  if (value === null || typeof value === "boolean" || typeof value === "string") {
    return JSON.stringify(value);
  }
  if (typeof value === "number") {
    if (!Number.isFinite(value)) throw new Error("JSON holds no NaN or Infinity");
    return JSON.stringify(value); // ECMAScript's Number-to-String: what RFC 8785 asks for; -0 is 0
  }
  if (Array.isArray(value)) {
    return "[" + value.map(canonicalJson).join(",") + "]";
  }
  if (typeof value === "object") {
    const members = value as Record<string, unknown>;
    const names = Object.keys(members)
      .filter((name) => members[name] !== undefined)
      .sort();
    return "{" + names.map((name) => JSON.stringify(name) + ":" + canonicalJson(members[name])).join(",") + "}";
  }
  throw new Error(`not JSON: ${typeof value}`);
}
