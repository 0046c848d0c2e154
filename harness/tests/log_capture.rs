//! A run's log capture must not lose events because another thread, with no subscriber of its
//! own, reached an event's callsite first. tracing caches one interest per callsite for the
//! process, and while exactly one dispatcher is registered it computes that interest from the
//! *registering* thread's default (tokio-rs/tracing#3611): a thread without a subscriber
//! caches `never`, and the capturing thread's events at that callsite are dropped. The matrix
//! captures the shown failing run's log on one thread while other threads run unlogged runs,
//! so this is the harness's case exactly. (This binary holds one test, so that no other test's
//! dispatcher hides the bug.)

use harness::clock::WorldClock;
use harness::history::History;
use harness::log::{dispatch, Lines, LogFilter, Secrets};

fn probe() {
    tracing::debug!(target: "probe", "reached");
}

#[test]
fn an_event_first_reached_on_a_thread_without_a_subscriber_is_still_captured() {
    let clock = WorldClock::default();
    let lines = Lines::default();
    let filter = LogFilter::parse("probe=debug").expect("a filter");
    let capture = dispatch(&filter, History::new(clock.clone()), clock, lines.clone(), Secrets::default());
    let _default = tracing::dispatcher::set_default(&capture);
    // Another thread, with no subscriber, reaches the callsite first.
    std::thread::spawn(probe).join().expect("the other thread ends");
    probe();
    let captured = lines.lock().expect("lines").len();
    assert_eq!(captured, 1, "the capturing thread's event was dropped");
}
