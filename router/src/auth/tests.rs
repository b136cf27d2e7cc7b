use super::*;

fn spec(name: &str, token: &str, roles: &[Role], dbs: &[&str]) -> TokenSpec {
    TokenSpec {
        name: name.into(),
        token: token.into(),
        roles: roles.to_vec(),
        databases: dbs.iter().map(|d| d.to_string()).collect(),
        write_points_per_sec: None,
        write_requests_per_sec: None,
        burst_secs: None,
    }
}

fn grants(specs: &[TokenSpec]) -> Vec<Grant> {
    specs.iter().map(|s| Grant::from_spec(s).unwrap()).collect()
}

#[test]
fn each_role_is_granted_only_what_it_lists() {
    let g = grants(&[
        spec("ingest", "w-secret-1", &[Role::Write], &[]),
        spec("grafana", "r-secret-1", &[Role::Read], &["metrics"]),
        spec("ops", "a-secret-1", &[Role::Admin, Role::Read], &[]),
    ]);
    assert_eq!(decide(&g, Some("w-secret-1"), Role::Write, &["x"]), Ok(0));
    assert!(matches!(
        decide(&g, Some("w-secret-1"), Role::Read, &["x"]),
        Err(Denied::Role {
            need: Role::Read,
            ..
        })
    ));
    assert_eq!(
        decide(&g, Some("r-secret-1"), Role::Read, &["metrics"]),
        Ok(1)
    );
    assert_eq!(
        decide(&g, Some("r-secret-1"), Role::Read, &["metrics", "other"]),
        Err(Denied::Database {
            token: "grafana".into(),
            database: "other".into()
        })
    );
    assert_eq!(decide(&g, Some("a-secret-1"), Role::Admin, &[]), Ok(2));
    assert!(decide(&g, Some("a-secret-1"), Role::Write, &[]).is_err());
    assert_eq!(decide(&g, None, Role::Read, &[]), Err(Denied::Missing));
    assert_eq!(
        decide(&g, Some("w-secret-"), Role::Write, &[]),
        Err(Denied::Invalid)
    );
}

#[test]
fn denials_are_401_or_403_naming_the_role() {
    let e: Error = Denied::Role {
        token: "grafana".into(),
        need: Role::Admin,
        has: vec![Role::Read],
    }
    .into();
    assert_eq!(e.status(), http::StatusCode::FORBIDDEN);
    assert!(e.to_string().contains("`admin` role"), "{e}");
    assert!(e.to_string().contains("grafana"), "{e}");
    let e: Error = Denied::Invalid.into();
    assert_eq!(e.status(), http::StatusCode::UNAUTHORIZED);
    let e: Error = Denied::Missing.into();
    assert_eq!(e.status(), http::StatusCode::UNAUTHORIZED);
}

#[test]
fn plain_auth_tokens_keep_every_role_and_no_tokens_means_open() {
    let open = Authorizer::from_sources(&TokenSources::default()).unwrap();
    assert!(!open.enabled());
    assert!(open.authorize(None, Role::Admin, &["any"]).is_ok());

    let o = TokenSources {
        auth_tokens: vec!["legacy-token".into()],
        ..TokenSources::default()
    };
    let a = Authorizer::from_sources(&o).unwrap();
    for role in Role::ALL {
        assert!(a.authorize(Some("legacy-token"), role, &["db"]).is_ok());
    }
    assert!(a.authorize(None, Role::Read, &[]).is_err());
}

#[test]
fn tokens_file_is_read_and_its_errors_name_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tokens.toml");
    std::fs::write(
        &path,
        r#"
[[tokens]]
name = "telegraf"
token = "tg-0123456789"
roles = ["write"]
databases = ["telegraf"]
write_points_per_sec = 50000
"#,
    )
    .unwrap();
    let o = TokenSources {
        tokens_file: Some(path.clone()),
        ..TokenSources::default()
    };
    let a = Authorizer::from_sources(&o).unwrap();
    let ok = a
        .authorize(Some("tg-0123456789"), Role::Write, &["telegraf"])
        .unwrap();
    assert_eq!(a.token_name(&ok), Some("telegraf"));
    assert!(a
        .authorize(Some("tg-0123456789"), Role::Write, &["other"])
        .is_err());

    std::fs::write(
        &path,
        "[[tokens]]\nname = \"x\"\ntoken = \"0123456789\"\nroles = [\"sudo\"]\n",
    )
    .unwrap();
    let e = Authorizer::from_sources(&o).err().unwrap().to_string();
    assert!(e.contains("tokens.toml"), "{e}");
    let dup = TokenSources {
        tokens: vec![
            spec("same", "0123456789a", &[Role::Read], &[]),
            spec("same", "0123456789b", &[Role::Read], &[]),
        ],
        ..TokenSources::default()
    };
    assert!(Authorizer::from_sources(&dup)
        .err()
        .unwrap()
        .to_string()
        .contains("same"));
}

#[test]
fn write_limits_answer_429_with_the_wait() {
    let mut s = spec("slow", "slow-token-1", &[Role::Write], &[]);
    s.write_requests_per_sec = Some(1.0);
    s.burst_secs = Some(2.0);
    let a = Authorizer::new(grants(&[s]));
    let access = a.authorize(Some("slow-token-1"), Role::Write, &[]).unwrap();
    assert!(a.admit_write(&access).is_ok());
    assert!(a.admit_write(&access).is_ok());
    let e = a.admit_write(&access).unwrap_err();
    assert_eq!(e.status(), http::StatusCode::TOO_MANY_REQUESTS);
    let wait = e.retry_after().unwrap();
    assert!(
        wait > Duration::ZERO && wait <= Duration::from_secs(1),
        "{wait:?}"
    );
    assert!(e.to_string().contains("slow"), "{e}");

    let mut p = spec("points", "points-token", &[Role::Write], &[]);
    p.write_points_per_sec = Some(100.0);
    let a = Authorizer::new(grants(&[p]));
    let access = a.authorize(Some("points-token"), Role::Write, &[]).unwrap();
    assert!(a.admit_write(&access).is_ok());
    a.charge_points(&access, 1000);
    let e = a.admit_write(&access).unwrap_err();
    let wait = e.retry_after().unwrap();
    assert!(
        wait > Duration::from_secs(8) && wait <= Duration::from_secs(9),
        "{wait:?}"
    );
}

#[test]
fn a_replaced_table_refuses_old_tokens_and_keeps_unchanged_buckets() {
    let mut slow = spec("slow", "slow-token-1", &[Role::Write], &[]);
    slow.write_requests_per_sec = Some(0.1);
    let a = Authorizer::new(grants(&[
        slow.clone(),
        spec("old", "old-token-1", &[Role::Read], &[]),
    ]));
    let before = a.authorize(Some("slow-token-1"), Role::Write, &[]).unwrap();
    assert!(a.admit_write(&before).is_ok());
    assert!(a.admit_write(&before).is_err(), "bucket empty");

    a.replace(grants(&[
        spec("new", "new-token-1", &[Role::Read], &[]),
        slow.clone(),
    ]));
    assert!(a.authorize(Some("old-token-1"), Role::Read, &[]).is_err());
    assert!(a.authorize(Some("new-token-1"), Role::Read, &[]).is_ok());
    let after = a.authorize(Some("slow-token-1"), Role::Write, &[]).unwrap();
    assert!(
        a.admit_write(&after).is_err(),
        "the same token and rate keep their (empty) bucket across a reload"
    );
    // A request let in before the reload still sees its own table.
    assert_eq!(a.token_name(&before), Some("slow"));

    slow.write_requests_per_sec = Some(100.0);
    a.replace(grants(&[slow]));
    let faster = a.authorize(Some("slow-token-1"), Role::Write, &[]).unwrap();
    assert!(a.admit_write(&faster).is_ok(), "a changed rate starts full");
}
