use super::*;

const H: i64 = HOUR_NS;

fn spec(name: &str, duration_ns: i64, shard_duration_ns: i64) -> PolicySpec {
    PolicySpec {
        name: name.into(),
        duration_ns,
        shard_duration_ns,
        replication: 1,
    }
}

#[test]
fn shard_group_durations_follow_influxdb() {
    assert_eq!(shard_group_duration(0), 168 * H);
    assert_eq!(shard_group_duration(365 * 24 * H), 168 * H);
    assert_eq!(shard_group_duration(7 * 24 * H), 24 * H);
    assert_eq!(shard_group_duration(24 * H), H);
    assert_eq!(normalised_shard_duration(0, 0), 168 * H);
    assert_eq!(normalised_shard_duration(60_000_000_000, 0), H);
    assert_eq!(normalised_shard_duration(2 * H, 0), 2 * H);
}

#[test]
fn go_durations_print_as_influxdb_shows_them() {
    assert_eq!(go_duration(0), "0s");
    assert_eq!(go_duration(168 * H), "168h0m0s");
    assert_eq!(go_duration(H + 30 * 60_000_000_000), "1h30m0s");
    assert_eq!(go_duration(90_000_000_000), "1m30s");
    assert_eq!(go_duration(1_500_000_000), "1.5s");
}

#[test]
fn a_new_database_has_its_default_in_its_own_storage() {
    let p = DatabasePolicies::create_database("db0", None, None).unwrap();
    assert_eq!(p.default, AUTOGEN);
    assert_eq!(p.policies[0].storage, "db0");
    assert_eq!(p.policies[0].shard_duration_ns, 168 * H);
    let named = spec("rp_r", 24 * H, 0);
    let p = DatabasePolicies::create_database("db1", None, Some(&named)).unwrap();
    assert_eq!(
        (p.default.as_str(), p.policies[0].storage.as_str()),
        ("rp_r", "db1")
    );
    assert_eq!(p.policies[0].shard_duration_ns, H);
}

#[test]
fn recreating_a_database_must_match_its_default() {
    let p = DatabasePolicies::create_database("db0", None, None).unwrap();
    assert_eq!(
        DatabasePolicies::create_database("db0", Some(&p), None).unwrap(),
        p
    );
    let other = spec(AUTOGEN, 24 * H, 0);
    assert_eq!(
        DatabasePolicies::create_database("db0", Some(&p), Some(&other)),
        Err(PolicyError::Conflict)
    );
    let same = spec(AUTOGEN, 0, 0);
    assert!(DatabasePolicies::create_database("db0", Some(&p), Some(&same)).is_ok());
}

#[test]
fn policies_resolve_by_name_or_default() {
    let p = DatabasePolicies::create_database("db0", None, None).unwrap();
    let (p, rp0) = p
        .create_policy("db0", &spec("rp0", 0, 0), true)
        .unwrap()
        .unwrap();
    assert_eq!(rp0.storage, "db0/rp0");
    assert_eq!(p.resolve(None).unwrap().name, "rp0");
    assert_eq!(p.resolve(Some("")).unwrap().name, "rp0");
    assert_eq!(p.resolve(Some(AUTOGEN)).unwrap().storage, "db0");
    assert_eq!(
        p.resolve(Some("rp1")),
        Err(PolicyError::NotFound("rp1".into()))
    );
}

#[test]
fn create_policy_is_idempotent_but_refuses_a_different_spec() {
    let p = DatabasePolicies::create_database("db0", None, None).unwrap();
    let (p, _) = p
        .create_policy("db0", &spec("rp1", H, 0), false)
        .unwrap()
        .unwrap();
    assert_eq!(p.create_policy("db0", &spec("rp1", H, 0), false), Ok(None));
    assert_eq!(
        p.create_policy("db0", &spec("rp1", 2 * H, 0), false),
        Err(PolicyError::Exists)
    );
    assert_eq!(
        p.create_policy("db0", &spec("rp1", H, 0), true),
        Err(PolicyError::Conflict)
    );
    assert_eq!(
        p.create_policy("db0", &spec("rp2", 30 * 60_000_000_000, 0), false),
        Err(PolicyError::DurationTooLow)
    );
    assert_eq!(
        p.create_policy("db0", &spec("rp2", 2 * H, 3 * H), false),
        Err(PolicyError::IncompatibleDurations)
    );
    assert_eq!(
        p.create_policy("db0", &spec("a/b", H, 0), false),
        Err(PolicyError::InvalidName)
    );
}

#[test]
fn alter_changes_only_what_it_names() {
    let p = DatabasePolicies::create_database("db0", None, None).unwrap();
    let (p, _) = p
        .create_policy("db0", &spec("rp1", 0, 0), false)
        .unwrap()
        .unwrap();
    let update = PolicyUpdate {
        duration_ns: Some(48 * H),
        make_default: true,
        ..PolicyUpdate::default()
    };
    // 48h is less than rp1's 168h shard groups.
    assert_eq!(
        p.alter_policy("rp1", &update),
        Err(PolicyError::IncompatibleDurations)
    );
    let update = PolicyUpdate {
        shard_duration_ns: Some(H),
        ..update
    };
    let (next, rp1) = p.alter_policy("rp1", &update).unwrap();
    assert_eq!((rp1.duration_ns, rp1.shard_duration_ns), (48 * H, H));
    assert_eq!(next.default, "rp1");
    assert_eq!(
        p.alter_policy("nope", &PolicyUpdate::default()),
        Err(PolicyError::NotFound("nope".into()))
    );
}

#[test]
fn dropping_the_default_leaves_none() {
    let p = DatabasePolicies::create_database("db0", None, None).unwrap();
    let (next, dropped) = p.drop_policy(AUTOGEN);
    assert_eq!(dropped.unwrap().storage, "db0");
    assert_eq!(next.default, AUTOGEN);
    assert_eq!(
        next.resolve(None),
        Err(PolicyError::NotFound(AUTOGEN.into()))
    );
    let (same, none) = next.drop_policy("missing");
    assert_eq!((same, none), (next, None));
}
