//! The claim store's contract, written as tests.
//!
//! Every property of a store connection is a plain function over a `&ClaimStore` in
//! [`contract`]; the `#[test]`s at the bottom call each one with a store from [`fresh`], the
//! only place a SQLite store is built, and again (`postgres::`) with one from [`fresh_postgres`]:
//! both backends keep one contract.
//!
//! What a caller relies on is what is checked: the boolean of every compare-and-set write ("did
//! I change the row?") and the row afterwards, read back with `load`. Times are the explicit
//! `now_ms` arguments; nothing sleeps or reads a clock.
//!
//! [`values`] checks the plain value types (statuses, leases, locations) and [`locations`] the
//! SQLite-specific ways to open a store (file, shared memory, private memory).

use executor::{
    ClaimStore, Claimed, NewClaim, OperationRecord, OwnedClaim, RecordStatus, StoreError, StoreLocation,
    TakeOver,
};

/// A new, empty store: the one place the tests build one.
fn fresh() -> ClaimStore {
    ClaimStore::open(&StoreLocation::PrivateMemory).expect("a private memory store opens")
}

const TENANT: &str = "acme";
const OTHER_TENANT: &str = "globex";
const LEASE_MS: u64 = 5_000;
const RETENTION_MS: u64 = 600_000;

/// A claim of `key` for [`TENANT`] by `owner` at `now_ms`, with a lease of [`LEASE_MS`].
fn claim(key: &str, owner: &str, now_ms: u64) -> NewClaim {
    claim_for(TENANT, key, owner, now_ms)
}

fn claim_for(tenant: &str, key: &str, owner: &str, now_ms: u64) -> NewClaim {
    NewClaim {
        tenant: tenant.into(),
        operation_key: key.into(),
        tool_name: "tickets.create".into(),
        tool_version: "2026-08-18".into(),
        request_fingerprint: format!("jcs-v1:sha256:{key}"),
        downstream_key: Some(format!("dk-{key}")),
        owner_token: owner.into(),
        now_ms,
        lease_until_ms: now_ms + LEASE_MS,
        expires_at_ms: now_ms + RETENTION_MS,
        request_json: Some(format!(r#"{{"title":"{key}"}}"#)),
    }
}

/// The claim `claim` as its owner names it in compare-and-set writes.
fn owned(claim: &NewClaim) -> OwnedClaim {
    OwnedClaim {
        tenant: claim.tenant.clone(),
        operation_key: claim.operation_key.clone(),
        owner_token: claim.owner_token.clone(),
        lease_until_ms: claim.lease_until_ms,
    }
}

/// `claim` as somebody else (an owner whose lease was taken over, or a stranger) names it.
fn stale(claim: &NewClaim, owner: &str) -> OwnedClaim {
    OwnedClaim { owner_token: owner.into(), ..owned(claim) }
}

/// Claims `claim`, which must be new, and returns the record it created.
async fn claimed(store: &ClaimStore, claim: &NewClaim) -> OperationRecord {
    match store.claim(claim).await.expect("claim") {
        Claimed::New(record) => record,
        other => panic!("expected a new claim of {:?}, got {other:?}", claim.operation_key),
    }
}

/// The record of `(TENANT, key)`, which must exist.
async fn load(store: &ClaimStore, key: &str) -> OperationRecord {
    load_for(store, TENANT, key).await
}

async fn load_for(store: &ClaimStore, tenant: &str, key: &str) -> OperationRecord {
    store.load(tenant, key).await.expect("load").unwrap_or_else(|| panic!("no record of {tenant}/{key}"))
}

/// A take-over of `(TENANT, key)` as observed (`owner`, `lease_until_ms`), by `new_owner` at
/// `now_ms`.
fn take_over(key: &str, observed: (Option<&str>, u64), new_owner: &str, now_ms: u64) -> TakeOver {
    TakeOver {
        tenant: TENANT.into(),
        operation_key: key.into(),
        observed_owner: observed.0.map(Into::into),
        observed_lease_until_ms: observed.1,
        new_owner: new_owner.into(),
        lease_until_ms: now_ms + LEASE_MS,
        now_ms,
    }
}

fn keys(records: &[OperationRecord]) -> Vec<(&str, &str)> {
    records.iter().map(|record| (record.tenant.as_str(), record.operation_key.as_str())).collect()
}

/// The properties, each over a store from [`fresh`].
mod contract {
    use super::*;

    /// The first claim inserts exactly the record `NewClaim::to_record` describes (every field
    /// reads back as written); a later claim of the same key, whatever it carries, gets the
    /// existing record untouched and changes nothing.
    pub async fn the_first_claim_wins_and_later_claims_see_the_untouched_record(store: &ClaimStore) {
        let first = claim("k1", "A", 1_000);
        let record = claimed(store, &first).await;
        assert_eq!(record, first.to_record());
        assert_eq!(record.status, RecordStatus::Pending);
        assert_eq!(load(store, "k1").await, record, "every field reads back as written");

        let mut second = claim("k1", "B", 2_000);
        second.request_fingerprint = "jcs-v1:sha256:other".into();
        second.tool_version = "2027-01-01".into();
        match store.claim(&second).await.expect("claim") {
            Claimed::Existing(existing) => assert_eq!(existing, record),
            other => panic!("expected the existing record, got {other:?}"),
        }
        assert_eq!(load(store, "k1").await, record, "a losing claim writes nothing");
        assert_eq!(store.records().await.expect("records"), vec![record]);
    }

    /// The primary key is (tenant, operation key): the same key under two tenants is two
    /// operations, and each tenant's reads see only its own.
    pub async fn the_same_key_under_two_tenants_is_two_operations(store: &ClaimStore) {
        let acme = claimed(store, &claim_for(TENANT, "k1", "A", 1_000)).await;
        let globex = claimed(store, &claim_for(OTHER_TENANT, "k1", "B", 2_000)).await;
        assert_eq!(load_for(store, TENANT, "k1").await, acme);
        assert_eq!(load_for(store, OTHER_TENANT, "k1").await, globex);
        assert_eq!(store.records().await.expect("records").len(), 2);
    }

    /// Loading an operation nobody claimed finds nothing.
    pub async fn loading_an_unclaimed_operation_finds_nothing(store: &ClaimStore) {
        assert_eq!(store.load(TENANT, "nobody").await.expect("load"), None);
        claimed(store, &claim("k1", "A", 1_000)).await;
        assert_eq!(store.load(TENANT, "k2").await.expect("load"), None);
        assert_eq!(store.load(OTHER_TENANT, "k1").await.expect("load"), None);
    }

    /// `records` lists every record, by tenant then key, each as `load` reads it.
    pub async fn records_lists_every_record_by_tenant_then_key(store: &ClaimStore) {
        assert_eq!(store.records().await.expect("records"), vec![]);
        claimed(store, &claim_for(OTHER_TENANT, "a", "A", 1_000)).await;
        claimed(store, &claim_for(TENANT, "b", "B", 2_000)).await;
        claimed(store, &claim_for(TENANT, "a", "C", 3_000)).await;
        let records = store.records().await.expect("records");
        assert_eq!(keys(&records), vec![(TENANT, "a"), (TENANT, "b"), (OTHER_TENANT, "a")]);
        for record in &records {
            assert_eq!(record, &load_for(store, &record.tenant, &record.operation_key).await);
        }
    }

    /// Times are stored as given, and a time beyond what the database holds saturates rather
    /// than wrapping to the past.
    pub async fn times_read_back_as_written_and_saturate(store: &ClaimStore) {
        let mut forever = claim("k1", "A", 1_234_567_890_123);
        forever.lease_until_ms = 1_234_567_895_123;
        forever.expires_at_ms = u64::MAX;
        claimed(store, &forever).await;
        let record = load(store, "k1").await;
        assert_eq!(record.created_at_ms, 1_234_567_890_123);
        assert_eq!(record.updated_at_ms, 1_234_567_890_123);
        assert_eq!(record.lease_until_ms, 1_234_567_895_123);
        assert!(record.expires_at_ms >= i64::MAX as u64, "{}", record.expires_at_ms);
    }

    /// The owner completes a pending claim: `applied` with the effect reference and the safe
    /// response, no owner, no lease, no reason, the request dropped; once only.
    pub async fn the_owner_completes_a_pending_claim_once(store: &ClaimStore) {
        let first = claim("k1", "A", 1_000);
        let before = claimed(store, &first).await;
        assert!(store
            .complete(&owned(&first), Some("ticket_1"), r#"{"ticket_id":"ticket_1"}"#, 2_000)
            .await
            .unwrap());
        let record = load(store, "k1").await;
        assert_eq!(
            record,
            OperationRecord {
                status: RecordStatus::Applied,
                effect_reference: Some("ticket_1".into()),
                response_json: Some(r#"{"ticket_id":"ticket_1"}"#.into()),
                owner_token: None,
                lease_until_ms: 0,
                reason: None,
                request_json: None,
                updated_at_ms: 2_000,
                ..before
            }
        );
        assert!(
            !store.complete(&owned(&first), Some("ticket_2"), "{}", 3_000).await.unwrap(),
            "applied already"
        );
        assert_eq!(load(store, "k1").await, record);
    }

    /// A stale owner token cannot complete, fail, mark unknown, release or set a job: each is
    /// false and the record is untouched.
    pub async fn a_stale_owner_changes_nothing(store: &ClaimStore) {
        let first = claim("k1", "A", 1_000);
        let before = claimed(store, &first).await;
        let stranger = stale(&first, "B");
        assert!(!store.complete(&stranger, Some("ticket_1"), "{}", 2_000).await.unwrap());
        assert!(!store.fail_permanent(&stranger, "unauthorized", 2_000).await.unwrap());
        assert!(!store.mark_unknown(&stranger, "connection closed", 2_000).await.unwrap());
        assert!(!store.release(&stranger, 2_000).await.unwrap());
        assert!(!store.set_job(&stranger, "job_1", 2_000).await.unwrap());
        assert_eq!(load(store, "k1").await, before);
        assert_eq!(store.reconciliations(TENANT, "k1").await.unwrap(), vec![]);
        assert_eq!(store.all_reconciliations().await.unwrap(), vec![]);
        // The same token for another operation or another tenant is not this claim's owner.
        let elsewhere = OwnedClaim { tenant: OTHER_TENANT.into(), ..owned(&first) };
        assert!(!store.complete(&elsewhere, Some("ticket_1"), "{}", 2_000).await.unwrap());
        assert!(!store.release(&elsewhere, 2_000).await.unwrap());
        assert_eq!(load(store, "k1").await, before);
    }

    /// The effect reference is optional: a completion without one stores none.
    pub async fn a_completion_may_store_no_effect_reference(store: &ClaimStore) {
        let first = claim("k1", "A", 1_000);
        claimed(store, &first).await;
        assert!(store.complete(&owned(&first), None, "{}", 2_000).await.unwrap());
        let record = load(store, "k1").await;
        assert_eq!((record.status, record.effect_reference), (RecordStatus::Applied, None));
    }

    /// The owner records a permanent refusal: `failed_permanent` with the reason code, no
    /// owner, no lease, the request dropped; once only, and never over a settled record.
    pub async fn the_owner_fails_a_pending_claim_permanently_once(store: &ClaimStore) {
        let first = claim("k1", "A", 1_000);
        let before = claimed(store, &first).await;
        assert!(store.fail_permanent(&owned(&first), "unauthorized", 2_000).await.unwrap());
        let record = load(store, "k1").await;
        assert_eq!(
            record,
            OperationRecord {
                status: RecordStatus::FailedPermanent,
                reason: Some("unauthorized".into()),
                owner_token: None,
                lease_until_ms: 0,
                request_json: None,
                updated_at_ms: 2_000,
                ..before
            }
        );
        assert!(!store.fail_permanent(&owned(&first), "other", 3_000).await.unwrap());
        assert!(!store.complete(&owned(&first), Some("ticket_1"), "{}", 3_000).await.unwrap());
        assert_eq!(load(store, "k1").await, record);

        // Nor over an applied record.
        let second = claim("k2", "A", 1_000);
        claimed(store, &second).await;
        assert!(store.complete(&owned(&second), Some("ticket_2"), "{}", 2_000).await.unwrap());
        let applied = load(store, "k2").await;
        assert!(!store.fail_permanent(&owned(&second), "unauthorized", 3_000).await.unwrap());
        assert_eq!(load(store, "k2").await, applied);
    }

    /// The owner hands an ambiguous outcome to reconciliation: `unknown` with the finding as
    /// reason, no owner, no lease, the request kept (the outcome is open), and exactly one
    /// reconciliation row with the finding, written with it.
    pub async fn the_owner_marks_a_pending_claim_unknown_with_a_reconciliation_row(store: &ClaimStore) {
        let first = claim("k1", "A", 1_000);
        let before = claimed(store, &first).await;
        assert!(store.mark_unknown(&owned(&first), "connection closed", 2_000).await.unwrap());
        let record = load(store, "k1").await;
        assert_eq!(
            record,
            OperationRecord {
                status: RecordStatus::Unknown,
                reason: Some("connection closed".into()),
                owner_token: None,
                lease_until_ms: 0,
                updated_at_ms: 2_000,
                ..before.clone()
            }
        );
        assert_eq!(record.request_json, before.request_json, "kept while the outcome is open");
        let rows = store.reconciliations(TENANT, "k1").await.unwrap();
        assert_eq!(rows.len(), 1, "{rows:?}");
        assert_eq!(
            (
                rows[0].tenant.as_str(),
                rows[0].operation_key.as_str(),
                rows[0].at_ms,
                rows[0].finding.as_str()
            ),
            (TENANT, "k1", 2_000, "connection closed")
        );
        assert_eq!(store.all_reconciliations().await.unwrap(), rows);

        // Once only: the old owner no longer owns it, and no second row appears.
        assert!(!store.mark_unknown(&owned(&first), "again", 3_000).await.unwrap());
        assert_eq!(load(store, "k1").await, record);
        assert_eq!(store.reconciliations(TENANT, "k1").await.unwrap(), rows);
    }

    /// A refused `mark_unknown` writes no reconciliation row, also beside other operations'.
    pub async fn a_refused_mark_unknown_writes_no_reconciliation_row(store: &ClaimStore) {
        let first = claim("k1", "A", 1_000);
        claimed(store, &first).await;
        assert!(store.complete(&owned(&first), Some("ticket_1"), "{}", 2_000).await.unwrap());
        let applied = load(store, "k1").await;
        assert!(!store.mark_unknown(&owned(&first), "late", 3_000).await.unwrap(), "applied already");
        assert!(!store.mark_unknown(&owned(&claim("k9", "A", 0)), "no such claim", 3_000).await.unwrap());
        assert_eq!(load(store, "k1").await, applied);
        assert_eq!(store.all_reconciliations().await.unwrap(), vec![]);
    }

    /// The owner hands a pending claim to the queue: still `pending`, with no owner and no
    /// lease, until a consumer takes it over; once only, and never a settled record.
    pub async fn the_owner_releases_a_pending_claim_to_the_queue(store: &ClaimStore) {
        let first = claim("k1", "A", 1_000);
        let before = claimed(store, &first).await;
        assert!(store.release(&owned(&first), 2_000).await.unwrap());
        let record = load(store, "k1").await;
        assert_eq!(
            record,
            OperationRecord { owner_token: None, lease_until_ms: 0, updated_at_ms: 2_000, ..before }
        );
        assert!(!record.lease_is_live(2_000));
        assert!(!store.release(&owned(&first), 3_000).await.unwrap(), "nobody owns it now");
        assert_eq!(load(store, "k1").await, record);

        let second = claim("k2", "A", 1_000);
        claimed(store, &second).await;
        assert!(store.fail_permanent(&owned(&second), "unauthorized", 2_000).await.unwrap());
        let failed = load(store, "k2").await;
        assert!(!store.release(&owned(&second), 3_000).await.unwrap());
        assert_eq!(load(store, "k2").await, failed);
    }

    /// The owner stores the downstream job: still `pending`, owned by the job (no owner, no
    /// lease), found by its job id within its tenant; never on a settled record.
    pub async fn the_owner_hands_a_pending_claim_to_a_downstream_job(store: &ClaimStore) {
        let first = claim("k1", "A", 1_000);
        let before = claimed(store, &first).await;
        assert_eq!(store.load_by_job(TENANT, "job_1").await.unwrap(), None);
        assert!(store.set_job(&owned(&first), "job_1", 2_000).await.unwrap());
        let record = load(store, "k1").await;
        assert_eq!(
            record,
            OperationRecord {
                job_id: Some("job_1".into()),
                owner_token: None,
                lease_until_ms: 0,
                updated_at_ms: 2_000,
                ..before
            }
        );
        assert_eq!(store.load_by_job(TENANT, "job_1").await.unwrap(), Some(record.clone()));
        assert_eq!(store.load_by_job(OTHER_TENANT, "job_1").await.unwrap(), None);
        assert_eq!(store.load_by_job(TENANT, "job_2").await.unwrap(), None);
        assert!(!store.set_job(&owned(&first), "job_2", 3_000).await.unwrap(), "the job owns it now");
        assert_eq!(load(store, "k1").await, record);

        let second = claim("k2", "A", 1_000);
        claimed(store, &second).await;
        assert!(store.complete(&owned(&second), Some("ticket_2"), "{}", 2_000).await.unwrap());
        let applied = load(store, "k2").await;
        assert!(!store.set_job(&owned(&second), "job_3", 3_000).await.unwrap());
        assert_eq!(load(store, "k2").await, applied);
        assert_eq!(store.load_by_job(TENANT, "job_3").await.unwrap(), None);
    }

    /// A take-over succeeds only against the exact observed owner and lease, and only once the
    /// lease has run out (at its last millisecond, not before); the new owner then owns the
    /// pending record and the old one can write nothing.
    pub async fn a_take_over_needs_the_exact_observation_and_an_expired_lease(store: &ClaimStore) {
        let first = claim("k1", "A", 1_000);
        let before = claimed(store, &first).await;
        let observed = (Some("A"), first.lease_until_ms);

        assert!(!store.take_over(&take_over("k1", observed, "B", first.lease_until_ms - 1)).await.unwrap());
        assert!(!store
            .take_over(&take_over("k1", (Some("Z"), first.lease_until_ms), "B", 7_000))
            .await
            .unwrap());
        assert!(!store.take_over(&take_over("k1", (None, first.lease_until_ms), "B", 7_000)).await.unwrap());
        assert!(!store
            .take_over(&take_over("k1", (Some("A"), first.lease_until_ms - 1), "B", 7_000))
            .await
            .unwrap());
        assert!(!store.take_over(&take_over("k2", observed, "B", 7_000)).await.unwrap(), "no such operation");
        assert_eq!(load(store, "k1").await, before, "refused take-overs change nothing");

        let winning = take_over("k1", observed, "B", first.lease_until_ms);
        assert!(store.take_over(&winning).await.unwrap());
        let record = load(store, "k1").await;
        assert_eq!(
            record,
            OperationRecord {
                owner_token: Some("B".into()),
                lease_until_ms: winning.lease_until_ms,
                updated_at_ms: winning.now_ms,
                ..before
            }
        );

        // The same observation loses the second time.
        assert!(!store.take_over(&TakeOver { new_owner: "C".into(), ..winning.clone() }).await.unwrap());
        assert_eq!(load(store, "k1").await, record);

        // The old owner can write nothing; the new one can.
        assert!(!store.complete(&owned(&first), Some("ticket_1"), "{}", 7_000).await.unwrap());
        assert_eq!(load(store, "k1").await, record);
        let new_owner =
            OwnedClaim { owner_token: "B".into(), lease_until_ms: winning.lease_until_ms, ..owned(&first) };
        assert!(store.complete(&new_owner, Some("ticket_1"), "{}", 7_000).await.unwrap());
        assert_eq!(load(store, "k1").await.status, RecordStatus::Applied);
    }

    /// `unknown` records and queued ones (pending, no owner) can be taken over by anyone who
    /// observed nobody; job-owned and settled records cannot.
    pub async fn unknown_and_queued_records_can_be_taken_over_but_not_jobs_or_settled_ones(
        store: &ClaimStore,
    ) {
        let unknown = claim("unknown", "A", 1_000);
        claimed(store, &unknown).await;
        assert!(store.mark_unknown(&owned(&unknown), "timeout", 2_000).await.unwrap());
        assert!(!store.take_over(&take_over("unknown", (Some("A"), 0), "B", 3_000)).await.unwrap());
        assert!(store.take_over(&take_over("unknown", (None, 0), "B", 3_000)).await.unwrap());
        let record = load(store, "unknown").await;
        assert_eq!(
            (record.status, record.owner_token.as_deref(), record.lease_until_ms, record.updated_at_ms),
            (RecordStatus::Pending, Some("B"), 3_000 + LEASE_MS, 3_000)
        );
        assert!(record.request_json.is_some(), "the new owner can send the request again");

        let queued = claim("queued", "A", 1_000);
        claimed(store, &queued).await;
        assert!(store.release(&owned(&queued), 2_000).await.unwrap());
        assert!(store.take_over(&take_over("queued", (None, 0), "consumer", 3_000)).await.unwrap());
        let record = load(store, "queued").await;
        assert_eq!((record.status, record.owner_token.as_deref()), (RecordStatus::Pending, Some("consumer")));

        let job = claim("job", "A", 1_000);
        claimed(store, &job).await;
        assert!(store.set_job(&owned(&job), "job_1", 2_000).await.unwrap());
        let before = load(store, "job").await;
        assert!(!store.take_over(&take_over("job", (None, 0), "B", 3_000)).await.unwrap());
        assert_eq!(load(store, "job").await, before);

        let applied = claim("applied", "A", 1_000);
        claimed(store, &applied).await;
        assert!(store.complete(&owned(&applied), Some("ticket_1"), "{}", 2_000).await.unwrap());
        let before = load(store, "applied").await;
        assert!(!store.take_over(&take_over("applied", (None, 0), "B", 3_000)).await.unwrap());
        assert_eq!(load(store, "applied").await, before);

        let failed = claim("failed", "A", 1_000);
        claimed(store, &failed).await;
        assert!(store.fail_permanent(&owned(&failed), "unauthorized", 2_000).await.unwrap());
        let before = load(store, "failed").await;
        assert!(!store.take_over(&take_over("failed", (None, 0), "B", 3_000)).await.unwrap());
        assert_eq!(load(store, "failed").await, before);
    }

    /// A job is settled exactly once, and only by its own job id: `applied` with the job id as
    /// effect reference and the response, no owner, no reason, the request dropped.
    pub async fn a_job_is_settled_exactly_once(store: &ClaimStore) {
        let first = claim("k1", "A", 1_000);
        let before = claimed(store, &first).await;
        assert!(store.set_job(&owned(&first), "job_1", 2_000).await.unwrap());
        let waiting = load(store, "k1").await;

        assert!(!store.settle_job(TENANT, "k1", "job_2", "{}", 3_000, false).await.unwrap(), "another job");
        assert!(
            !store.settle_job(OTHER_TENANT, "k1", "job_1", "{}", 3_000, false).await.unwrap(),
            "another tenant"
        );
        assert!(
            !store.settle_job(TENANT, "k9", "job_1", "{}", 3_000, false).await.unwrap(),
            "no such operation"
        );
        assert_eq!(load(store, "k1").await, waiting);

        assert!(store
            .settle_job(TENANT, "k1", "job_1", r#"{"job_id":"job_1"}"#, 4_000, false)
            .await
            .unwrap());
        let settled = load(store, "k1").await;
        assert_eq!(
            settled,
            OperationRecord {
                status: RecordStatus::Applied,
                job_id: Some("job_1".into()),
                effect_reference: Some("job_1".into()),
                response_json: Some(r#"{"job_id":"job_1"}"#.into()),
                owner_token: None,
                lease_until_ms: 0,
                reason: None,
                request_json: None,
                updated_at_ms: 4_000,
                ..before
            }
        );
        assert!(!store.settle_job(TENANT, "k1", "job_1", r#"{"again":true}"#, 5_000, false).await.unwrap());
        assert_eq!(load(store, "k1").await, settled, "only the first settlement wrote");
    }

    /// The settlement that wins owes the job's completion notice, in the same transaction; a
    /// losing one owes nothing. The notice is claimed by compare-and-set on when it was last
    /// claimed, and is no longer owed once done.
    pub async fn a_settled_job_owes_its_notice_until_it_is_done(store: &ClaimStore) {
        let first = claim("k1", "owner-a", 1_000);
        store.claim(&first).await.unwrap();
        assert!(store.set_job(&owned(&first), "job_1", 2_000).await.unwrap());
        assert_eq!(store.due_notice(TENANT, "k1").await.unwrap(), None, "nothing owed before the settlement");
        assert!(store.settle_job(TENANT, "k1", "job_1", "{}", 3_000, true).await.unwrap());
        assert_eq!(store.due_notice(TENANT, "k1").await.unwrap(), Some(("job_1".to_owned(), 3_000)));
        assert_eq!(store.due_notice(OTHER_TENANT, "k1").await.unwrap(), None, "owed within its tenant");
        // A second settlement changes nothing and owes nothing more.
        assert!(!store.settle_job(TENANT, "k1", "job_1", "{}", 9_000, true).await.unwrap());
        assert_eq!(store.due_notice(TENANT, "k1").await.unwrap(), Some(("job_1".to_owned(), 3_000)));
        // One of two callers that saw the same claim gets it; a stale observation does not.
        assert!(!store.claim_notice(TENANT, "k1", 2_999, 7_000).await.unwrap());
        assert!(store.claim_notice(TENANT, "k1", 3_000, 7_000).await.unwrap());
        assert!(!store.claim_notice(TENANT, "k1", 3_000, 7_001).await.unwrap());
        assert_eq!(store.due_notice(TENANT, "k1").await.unwrap(), Some(("job_1".to_owned(), 7_000)));
        assert!(store.notice_done(TENANT, "k1").await.unwrap());
        assert!(!store.notice_done(TENANT, "k1").await.unwrap(), "done once");
        assert_eq!(store.due_notice(TENANT, "k1").await.unwrap(), None);
        // A settlement that owes no notice (the tool sends none) records none.
        let second = claim("k2", "owner-b", 1_000);
        store.claim(&second).await.unwrap();
        assert!(store.settle_job(TENANT, "k2", "job_2", "{}", 3_000, false).await.unwrap());
        assert_eq!(store.due_notice(TENANT, "k2").await.unwrap(), None);
    }

    /// A record with no job recorded yet (`unknown`, or pending under its owner) is settled
    /// by the job that turns out to be its; a settled record is not settled again.
    pub async fn a_record_without_a_job_is_settled_by_its_job_but_a_settled_one_is_not(store: &ClaimStore) {
        let unknown = claim("unknown", "A", 1_000);
        claimed(store, &unknown).await;
        assert!(store.mark_unknown(&owned(&unknown), "timeout", 2_000).await.unwrap());
        assert!(store.settle_job(TENANT, "unknown", "job_9", "{}", 3_000, false).await.unwrap());
        let record = load(store, "unknown").await;
        assert_eq!(
            (record.status, record.job_id.as_deref(), record.effect_reference.as_deref(), record.reason),
            (RecordStatus::Applied, Some("job_9"), Some("job_9"), None)
        );

        let pending = claim("pending", "A", 1_000);
        claimed(store, &pending).await;
        assert!(store.settle_job(TENANT, "pending", "job_8", "{}", 3_000, false).await.unwrap());
        let record = load(store, "pending").await;
        assert_eq!((record.status, record.owner_token), (RecordStatus::Applied, None));

        let failed = claim("failed", "A", 1_000);
        claimed(store, &failed).await;
        assert!(store.fail_permanent(&owned(&failed), "unauthorized", 2_000).await.unwrap());
        let before = load(store, "failed").await;
        assert!(!store.settle_job(TENANT, "failed", "job_7", "{}", 3_000, false).await.unwrap());
        assert_eq!(load(store, "failed").await, before);
    }

    /// Giving up a job fails exactly that pending job (`failed_permanent` with the reason, the
    /// request dropped), once; another job id, a record without a job or a missing record is
    /// refused and untouched.
    pub async fn giving_up_a_job_fails_only_that_pending_job(store: &ClaimStore) {
        let first = claim("k1", "A", 1_000);
        claimed(store, &first).await;
        assert!(store.set_job(&owned(&first), "job_1", 2_000).await.unwrap());
        let waiting = load(store, "k1").await;

        assert!(!store.give_up_job(TENANT, "k1", "job_2", "job_timeout", 3_000).await.unwrap());
        assert!(!store.give_up_job(OTHER_TENANT, "k1", "job_1", "job_timeout", 3_000).await.unwrap());
        assert!(!store.give_up_job(TENANT, "k9", "job_1", "job_timeout", 3_000).await.unwrap());
        assert_eq!(load(store, "k1").await, waiting);

        assert!(store.give_up_job(TENANT, "k1", "job_1", "job_timeout", 4_000).await.unwrap());
        let record = load(store, "k1").await;
        assert_eq!(
            record,
            OperationRecord {
                status: RecordStatus::FailedPermanent,
                reason: Some("job_timeout".into()),
                request_json: None,
                updated_at_ms: 4_000,
                ..waiting
            }
        );
        assert!(!store.give_up_job(TENANT, "k1", "job_1", "again", 5_000).await.unwrap(), "once only");
        assert_eq!(load(store, "k1").await, record);

        let without_job = claim("k2", "A", 1_000);
        let before = claimed(store, &without_job).await;
        assert!(!store.give_up_job(TENANT, "k2", "job_1", "job_timeout", 3_000).await.unwrap());
        assert_eq!(load(store, "k2").await, before);
    }

    /// `write_job_result` (for a mutant) writes `applied` with the job whatever the record's
    /// state and says true whenever the record exists; false only when there is none.
    pub async fn writing_a_job_result_overwrites_any_existing_record(store: &ClaimStore) {
        assert!(!store.write_job_result(TENANT, "k1", "job_1", "{}", 1_000).await.unwrap(), "no record");
        assert_eq!(store.load(TENANT, "k1").await.unwrap(), None);

        let first = claim("k1", "A", 1_000);
        claimed(store, &first).await;
        assert!(store
            .complete(&owned(&first), Some("ticket_1"), r#"{"ticket_id":"ticket_1"}"#, 2_000)
            .await
            .unwrap());
        assert!(store.write_job_result(TENANT, "k1", "job_7", r#"{"job_id":"job_7"}"#, 3_000).await.unwrap());
        let record = load(store, "k1").await;
        assert_eq!(
            (
                record.status,
                record.job_id.as_deref(),
                record.effect_reference.as_deref(),
                record.response_json.as_deref(),
                record.updated_at_ms
            ),
            (RecordStatus::Applied, Some("job_7"), Some("job_7"), Some(r#"{"job_id":"job_7"}"#), 3_000)
        );
        assert!(
            store.write_job_result(TENANT, "k1", "job_7", "{}", 4_000).await.unwrap(),
            "again, still true"
        );
        assert_eq!(load(store, "k1").await.updated_at_ms, 4_000);
    }

    /// Only a terminal record becomes a tombstone, once: it keeps key, fingerprint and effect
    /// reference, and drops the response and the request.
    pub async fn only_terminal_records_become_tombstones_once(store: &ClaimStore) {
        assert!(!store.tombstone(TENANT, "missing", 1_000).await.unwrap());

        let pending = claim("pending", "A", 1_000);
        let before = claimed(store, &pending).await;
        assert!(!store.tombstone(TENANT, "pending", 700_000).await.unwrap());
        assert_eq!(load(store, "pending").await, before);

        let unknown = claim("unknown", "A", 1_000);
        claimed(store, &unknown).await;
        assert!(store.mark_unknown(&owned(&unknown), "timeout", 2_000).await.unwrap());
        let before = load(store, "unknown").await;
        assert!(!store.tombstone(TENANT, "unknown", 700_000).await.unwrap());
        assert_eq!(load(store, "unknown").await, before);

        let applied = claim("applied", "A", 1_000);
        claimed(store, &applied).await;
        assert!(store
            .complete(&owned(&applied), Some("ticket_1"), r#"{"ticket_id":"ticket_1"}"#, 2_000)
            .await
            .unwrap());
        let before = load(store, "applied").await;
        assert!(store.tombstone(TENANT, "applied", 700_000).await.unwrap());
        let record = load(store, "applied").await;
        assert_eq!(
            record,
            OperationRecord {
                status: RecordStatus::Tombstone,
                response_json: None,
                request_json: None,
                updated_at_ms: 700_000,
                ..before.clone()
            }
        );
        assert_eq!(record.effect_reference.as_deref(), Some("ticket_1"));
        assert_eq!(record.request_fingerprint, before.request_fingerprint);
        assert!(!store.tombstone(TENANT, "applied", 800_000).await.unwrap(), "a tombstone already");
        assert_eq!(load(store, "applied").await, record);

        let failed = claim("failed", "A", 1_000);
        claimed(store, &failed).await;
        assert!(store.fail_permanent(&owned(&failed), "unauthorized", 2_000).await.unwrap());
        assert!(store.tombstone(TENANT, "failed", 700_000).await.unwrap());
        assert_eq!(load(store, "failed").await.status, RecordStatus::Tombstone);
        assert!(!store.tombstone(TENANT, "failed", 800_000).await.unwrap());
    }

    /// `forget` (for a mutant) deletes exactly the named record and says whether there was one.
    pub async fn forget_deletes_exactly_the_named_record(store: &ClaimStore) {
        assert!(!store.forget(TENANT, "k1").await.unwrap(), "nothing to delete");
        claimed(store, &claim_for(TENANT, "k1", "A", 1_000)).await;
        let other = claimed(store, &claim_for(OTHER_TENANT, "k1", "A", 1_000)).await;
        let sibling = claimed(store, &claim_for(TENANT, "k2", "A", 1_000)).await;
        assert!(store.forget(TENANT, "k1").await.unwrap());
        assert_eq!(store.load(TENANT, "k1").await.unwrap(), None);
        assert_eq!(store.records().await.unwrap(), vec![sibling, other]);
        assert!(!store.forget(TENANT, "k1").await.unwrap(), "deleted already");
        // The key is free again: a new claim of it is new.
        claimed(store, &claim_for(TENANT, "k1", "B", 2_000)).await;
    }

    /// A webhook event id is new exactly once: true the first time, false for every redelivery.
    pub async fn a_webhook_event_id_is_new_exactly_once(store: &ClaimStore) {
        assert!(store.record_event("evt_1", TENANT, Some("k1"), 1_000).await.unwrap());
        assert!(!store.record_event("evt_1", TENANT, Some("k1"), 2_000).await.unwrap());
        assert!(!store.record_event("evt_1", TENANT, None, 3_000).await.unwrap());
        assert!(store.record_event("evt_2", TENANT, None, 4_000).await.unwrap());
        assert!(!store.record_event("evt_2", TENANT, None, 5_000).await.unwrap());
    }

    /// Reconciliation findings are read back per operation (that tenant's key only) and all
    /// together, each oldest first, with what was written.
    pub async fn reconciliation_findings_are_read_back_per_operation_and_all(store: &ClaimStore) {
        assert_eq!(store.all_reconciliations().await.unwrap(), vec![]);
        store.record_reconciliation(TENANT, "k1", 10, "looked up: ticket_1").await.unwrap();
        store.record_reconciliation(TENANT, "k2", 20, "no receipt").await.unwrap();
        store.record_reconciliation(OTHER_TENANT, "k1", 30, "elsewhere").await.unwrap();
        store.record_reconciliation(TENANT, "k1", 40, "still unknown").await.unwrap();

        let summary = |rows: Vec<executor::Reconciliation>| -> Vec<(String, String, u64, String)> {
            assert!(rows.windows(2).all(|pair| pair[0].id < pair[1].id), "oldest first: {rows:?}");
            rows.into_iter().map(|row| (row.tenant, row.operation_key, row.at_ms, row.finding)).collect()
        };
        let row = |tenant: &str, key: &str, at_ms: u64, finding: &str| {
            (tenant.to_owned(), key.to_owned(), at_ms, finding.to_owned())
        };
        assert_eq!(
            summary(store.reconciliations(TENANT, "k1").await.unwrap()),
            vec![row(TENANT, "k1", 10, "looked up: ticket_1"), row(TENANT, "k1", 40, "still unknown")]
        );
        assert_eq!(
            summary(store.reconciliations(OTHER_TENANT, "k1").await.unwrap()),
            vec![row(OTHER_TENANT, "k1", 30, "elsewhere")]
        );
        assert_eq!(store.reconciliations(TENANT, "k3").await.unwrap(), vec![]);
        assert_eq!(
            summary(store.all_reconciliations().await.unwrap()),
            vec![
                row(TENANT, "k1", 10, "looked up: ticket_1"),
                row(TENANT, "k2", 20, "no receipt"),
                row(OTHER_TENANT, "k1", 30, "elsewhere"),
                row(TENANT, "k1", 40, "still unknown"),
            ]
        );
    }

    /// `unsettled` lists, by tenant then key, exactly the open records that no queue or job
    /// will settle: `unknown` ones and owned `pending` ones without a job.
    pub async fn unsettled_lists_exactly_the_open_records_nobody_else_will_settle(store: &ClaimStore) {
        assert_eq!(store.unsettled().await.unwrap(), vec![]);
        claimed(store, &claim_for(OTHER_TENANT, "a-owned", "A", 1_000)).await;
        claimed(store, &claim("a-owned", "A", 1_000)).await;
        let unknown = claim("b-unknown", "A", 1_000);
        claimed(store, &unknown).await;
        assert!(store.mark_unknown(&owned(&unknown), "timeout", 2_000).await.unwrap());
        let queued = claim("c-queued", "A", 1_000);
        claimed(store, &queued).await;
        assert!(store.release(&owned(&queued), 2_000).await.unwrap());
        let job = claim("d-job", "A", 1_000);
        claimed(store, &job).await;
        assert!(store.set_job(&owned(&job), "job_1", 2_000).await.unwrap());
        let applied = claim("e-applied", "A", 1_000);
        claimed(store, &applied).await;
        assert!(store.complete(&owned(&applied), Some("ticket_1"), "{}", 2_000).await.unwrap());
        let failed = claim("f-failed", "A", 1_000);
        claimed(store, &failed).await;
        assert!(store.fail_permanent(&owned(&failed), "unauthorized", 2_000).await.unwrap());
        let tombstone = claim("g-tombstone", "A", 1_000);
        claimed(store, &tombstone).await;
        assert!(store.complete(&owned(&tombstone), Some("ticket_2"), "{}", 2_000).await.unwrap());
        assert!(store.tombstone(TENANT, "g-tombstone", 700_000).await.unwrap());

        let unsettled = store.unsettled().await.unwrap();
        assert_eq!(
            keys(&unsettled),
            vec![(TENANT, "a-owned"), (TENANT, "b-unknown"), (OTHER_TENANT, "a-owned")]
        );
        for record in &unsettled {
            assert_eq!(record, &load_for(store, &record.tenant, &record.operation_key).await);
        }
    }

    /// Webhook matching: a record is found by the downstream key it sent, within its tenant.
    pub async fn a_record_is_found_by_its_downstream_key_within_its_tenant(store: &ClaimStore) {
        assert_eq!(store.load_by_downstream_key(TENANT, "dk-k1").await.unwrap(), None);
        let record = claimed(store, &claim("k1", "A", 1_000)).await;
        claimed(store, &claim("k2", "A", 1_000)).await;
        assert_eq!(store.load_by_downstream_key(TENANT, "dk-k1").await.unwrap(), Some(record));
        assert_eq!(
            store.load_by_downstream_key(TENANT, "dk-k2").await.unwrap().map(|r| r.operation_key),
            Some("k2".into())
        );
        assert_eq!(store.load_by_downstream_key(OTHER_TENANT, "dk-k1").await.unwrap(), None);
        assert_eq!(store.load_by_downstream_key(TENANT, "dk-k3").await.unwrap(), None);
    }
}

/// A new, empty Postgres store: a schema of its own in `REPLAYLAB_TEST_POSTGRES`'s database;
/// `None` (the test is skipped, and says so) when that is unset outside CI.
fn fresh_postgres(test: &str) -> Option<ClaimStore> {
    let url = executor::test_postgres(test)?;
    let location = StoreLocation::Postgres { url, schema: Some(executor::fresh_schema("conformance")) };
    Some(ClaimStore::open(&location).unwrap_or_else(|error| panic!("{test}: {error}")))
}

/// One `#[test]` per property and backend: `sqlite::` with a store from [`fresh`], `postgres::`
/// with one from [`fresh_postgres`].
macro_rules! conformance_tests {
    ($($property:ident),* $(,)?) => {
        mod sqlite {
            use super::*;
            $(
                #[tokio::test]
                async fn $property() {
                    contract::$property(&fresh()).await;
                }
            )*
        }
        mod postgres {
            use super::*;
            $(
                #[tokio::test]
                async fn $property() {
                    if let Some(store) = fresh_postgres(stringify!($property)) {
                        contract::$property(&store).await;
                    }
                }
            )*
        }
    };
}

conformance_tests!(
    the_first_claim_wins_and_later_claims_see_the_untouched_record,
    the_same_key_under_two_tenants_is_two_operations,
    loading_an_unclaimed_operation_finds_nothing,
    records_lists_every_record_by_tenant_then_key,
    times_read_back_as_written_and_saturate,
    the_owner_completes_a_pending_claim_once,
    a_stale_owner_changes_nothing,
    a_completion_may_store_no_effect_reference,
    the_owner_fails_a_pending_claim_permanently_once,
    the_owner_marks_a_pending_claim_unknown_with_a_reconciliation_row,
    a_refused_mark_unknown_writes_no_reconciliation_row,
    the_owner_releases_a_pending_claim_to_the_queue,
    the_owner_hands_a_pending_claim_to_a_downstream_job,
    a_take_over_needs_the_exact_observation_and_an_expired_lease,
    unknown_and_queued_records_can_be_taken_over_but_not_jobs_or_settled_ones,
    a_job_is_settled_exactly_once,
    a_settled_job_owes_its_notice_until_it_is_done,
    a_record_without_a_job_is_settled_by_its_job_but_a_settled_one_is_not,
    giving_up_a_job_fails_only_that_pending_job,
    writing_a_job_result_overwrites_any_existing_record,
    only_terminal_records_become_tombstones_once,
    forget_deletes_exactly_the_named_record,
    a_webhook_event_id_is_new_exactly_once,
    reconciliation_findings_are_read_back_per_operation_and_all,
    unsettled_lists_exactly_the_open_records_nobody_else_will_settle,
    a_record_is_found_by_its_downstream_key_within_its_tenant,
);

/// The plain value types: statuses, leases, locations.
mod values {
    use super::*;

    const ALL: [RecordStatus; 5] = [
        RecordStatus::Pending,
        RecordStatus::Applied,
        RecordStatus::FailedPermanent,
        RecordStatus::Unknown,
        RecordStatus::Tombstone,
    ];

    #[test]
    fn a_status_round_trips_through_its_column_text() {
        let texts: Vec<&str> = ALL.iter().map(|status| status.as_str()).collect();
        assert_eq!(texts, ["pending", "applied", "failed_permanent", "unknown", "tombstone"]);
        for status in ALL {
            assert_eq!(RecordStatus::parse(status.as_str()), Some(status));
        }
        for text in ["", "done", "Applied", "pending "] {
            assert_eq!(RecordStatus::parse(text), None, "{text:?}");
        }
    }

    #[test]
    fn only_applied_and_failed_permanent_are_terminal() {
        let terminal: Vec<RecordStatus> = ALL.into_iter().filter(|status| status.is_terminal()).collect();
        assert_eq!(terminal, [RecordStatus::Applied, RecordStatus::FailedPermanent]);
    }

    #[test]
    fn a_lease_is_live_while_owned_and_until_its_last_millisecond() {
        let record = claim("k1", "A", 1_000).to_record();
        let end = record.lease_until_ms;
        assert!(record.lease_is_live(1_000));
        assert!(record.lease_is_live(end - 1));
        assert!(!record.lease_is_live(end), "a lease ending at `end` has run out at `end`");
        assert!(!record.lease_is_live(end + 1));
        let unowned = OperationRecord { owner_token: None, ..record };
        assert!(!unowned.lease_is_live(1_000), "no owner, no live lease");
    }

    #[test]
    fn a_location_displays_where_the_store_is() {
        let file = StoreLocation::File("/var/lib/replaylab/claims.db".into()).to_string();
        let shared = StoreLocation::SharedMemory("run-S01-seed-7".into()).to_string();
        let private = StoreLocation::PrivateMemory.to_string();
        assert!(file.contains("/var/lib/replaylab/claims.db"), "{file}");
        assert!(shared.contains("run-S01-seed-7"), "{shared}");
        assert!(private.contains("memory"), "{private}");
        assert!(file != shared && shared != private && file != private);
    }

    #[test]
    fn fresh_shared_memory_names_keep_the_label_as_an_identifier_and_are_distinct() {
        let first = StoreLocation::fresh_shared_memory("S05 concurrent/claim seed=7");
        let second = StoreLocation::fresh_shared_memory("S05 concurrent/claim seed=7");
        assert_ne!(first, second);
        for location in [&first, &second] {
            let StoreLocation::SharedMemory(name) = location else { panic!("{location:?}") };
            let (label, number) = name.rsplit_once('-').expect("label-number");
            assert_eq!(label, "S05_concurrent_claim_seed_7", "{name}");
            assert!(!number.is_empty() && number.chars().all(|c| c.is_ascii_digit()), "{name}");
        }
        let StoreLocation::SharedMemory(name) = StoreLocation::fresh_shared_memory("Run-1_a.b") else {
            unreachable!()
        };
        assert!(name.starts_with("Run-1_a.b-"), "identifier characters are kept: {name}");
    }

    #[tokio::test]
    async fn fresh_shared_memory_names_of_long_labels_are_kept_long_and_still_open() {
        let label = "x".repeat(100);
        let StoreLocation::SharedMemory(name) = StoreLocation::fresh_shared_memory(&label) else {
            unreachable!()
        };
        assert!(name.starts_with(&format!("{label}-")), "a 100-character label is kept whole: {name}");

        let location = StoreLocation::fresh_shared_memory(&"y".repeat(500));
        let StoreLocation::SharedMemory(name) = &location else { unreachable!() };
        assert!(name.starts_with(&"y".repeat(100)), "{name}");
        let store = ClaimStore::open(&location).expect("a shortened label still makes a valid name");
        claimed(&store, &claim("k1", "A", 1_000)).await;
    }
}

/// The SQLite locations: how a store is opened and who shares it.
mod locations {
    use super::*;

    /// A new empty directory under the system temp dir, removed when dropped.
    struct Scratch(std::path::PathBuf);

    impl Scratch {
        fn new(name: &str) -> Self {
            let dir = std::env::temp_dir()
                .join(format!("replaylab-store-conformance-{name}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).expect("a scratch directory");
            Scratch(dir)
        }
    }

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    #[tokio::test]
    async fn a_file_store_is_created_shared_by_connections_and_survives_reopening() {
        let scratch = Scratch::new("file");
        let path = scratch.0.join("claims.db");
        assert!(!path.exists());
        let location = StoreLocation::File(path.clone());
        let first = claim("k1", "A", 1_000);
        let record = {
            let store = ClaimStore::open(&location).expect("a new file store is created");
            let record = claimed(&store, &first).await;
            assert!(path.exists());
            let other = ClaimStore::open(&location).expect("a second connection");
            assert_eq!(load(&other, "k1").await, record);
            assert!(matches!(other.claim(&claim("k1", "B", 2_000)).await.unwrap(), Claimed::Existing(_)));
            assert!(other.complete(&owned(&first), Some("ticket_1"), "{}", 2_000).await.unwrap());
            load(&store, "k1").await
        };
        assert_eq!(record.status, RecordStatus::Applied);
        let reopened = ClaimStore::open(&location).expect("reopen");
        assert_eq!(reopened.records().await.unwrap(), vec![record]);
        assert!(reopened.record_event("evt_1", TENANT, None, 3_000).await.unwrap());
    }

    #[test]
    fn a_file_store_in_a_missing_directory_is_an_open_error_naming_it() {
        let scratch = Scratch::new("missing");
        let path = scratch.0.join("no-such-dir").join("claims.db");
        let error = ClaimStore::open(&StoreLocation::File(path.clone())).expect_err("no directory");
        assert!(matches!(error, StoreError::Open { .. }), "{error:?}");
        assert!(error.to_string().contains(&path.display().to_string()), "{error}");
    }

    #[tokio::test]
    async fn a_shared_memory_store_is_shared_by_name_and_lives_while_a_connection_is_open() {
        let location = StoreLocation::fresh_shared_memory("conformance shared");
        let keeper = ClaimStore::open(&location).expect("open");
        let first = claim("k1", "A", 1_000);
        let record = {
            let worker = ClaimStore::open(&location).expect("a second connection");
            let record = claimed(&worker, &first).await;
            assert_eq!(load(&keeper, "k1").await, record);
            assert!(matches!(keeper.claim(&claim("k1", "B", 2_000)).await.unwrap(), Claimed::Existing(_)));
            assert!(keeper.complete(&owned(&first), Some("ticket_1"), "{}", 2_000).await.unwrap());
            assert_eq!(load(&worker, "k1").await.status, RecordStatus::Applied);
            load(&worker, "k1").await
        };
        let restarted = ClaimStore::open(&location).expect("reopen");
        assert_eq!(restarted.records().await.unwrap(), vec![record]);

        let elsewhere = ClaimStore::open(&StoreLocation::fresh_shared_memory("conformance shared")).unwrap();
        assert_eq!(elsewhere.records().await.unwrap(), vec![]);

        // It is memory, not a file: once the last connection closes, the database is gone.
        drop((keeper, restarted));
        let after = ClaimStore::open(&location).expect("reopen after the last connection closed");
        assert_eq!(after.records().await.unwrap(), vec![]);
    }

    #[tokio::test]
    async fn private_memory_stores_are_not_shared() {
        let one = fresh();
        let two = fresh();
        claimed(&one, &claim("k1", "A", 1_000)).await;
        assert_eq!(two.load(TENANT, "k1").await.unwrap(), None);
        claimed(&two, &claim("k1", "B", 1_000)).await;
    }

    #[tokio::test]
    async fn shared_memory_names_must_be_plain_identifiers() {
        let too_long = "n".repeat(129);
        for name in ["", "a b", "a?mode=rw", "x/../y", "caf\u{e9}", "a&cache=private", &too_long] {
            match ClaimStore::open(&StoreLocation::SharedMemory(name.into())) {
                Err(StoreError::InvalidName(refused)) => assert_eq!(refused, name),
                other => panic!("{name:?}: expected InvalidName, got {other:?}"),
            }
        }
        let longest = format!("conformance-longest-{}", "n".repeat(128 - 20));
        assert_eq!(longest.len(), 128);
        for name in ["a", "Conformance-valid_name.1", longest.as_str()] {
            let store = ClaimStore::open(&StoreLocation::SharedMemory(name.into()))
                .unwrap_or_else(|error| panic!("{name:?}: {error}"));
            claimed(&store, &claim("k1", "A", 1_000)).await;
        }
    }
}
