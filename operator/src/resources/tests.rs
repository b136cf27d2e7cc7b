use super::*;
use crate::crd::*;
use crate::dashboards;

pub fn cluster(name: &str) -> ShardhouseCluster {
    let mut c = ShardhouseCluster::new(
        name,
        ShardhouseClusterSpec {
            image: ImageSpec::default(),
            nodes: NodeSpec {
                replicas: 3,
                cores: 4,
                memory: "8Gi".into(),
                storage: StorageSpec {
                    size: "50Gi".into(),
                    storage_class_name: Some("fast".into()),
                },
                resources: None,
                anti_affinity: AntiAffinity::Preferred,
                backup_credentials_secret: None,
            },
            routers: RouterSpec::default(),
            shard_count: 16,
            replication_factor: 3,
            etcd: EtcdSpec::default(),
            auth_secret: Some("tokens".into()),
            security: SecuritySpec::default(),
            autoscaling: None,
            monitoring: MonitoringSpec::default(),
        },
    );
    c.metadata.namespace = Some("prod".into());
    c.metadata.uid = Some("uid-1".into());
    c
}

fn decisions(n: i32) -> Decisions {
    Decisions {
        node_replicas: n,
        service_monitor: true,
    }
}

#[test]
fn node_statefulset_follows_spec_and_decision() {
    let c = cluster("ts");
    let d = desired(&c, &decisions(5));
    let sts = &d.nodes;
    assert_eq!(sts.metadata.name.as_deref(), Some("ts-node"));
    assert_eq!(sts.metadata.namespace.as_deref(), Some("prod"));
    let spec = sts.spec.as_ref().unwrap();
    assert_eq!(spec.replicas, Some(5), "replicas come from the decision");
    assert_eq!(spec.service_name.as_deref(), Some("ts-node"));
    assert_eq!(
        spec.update_strategy.as_ref().unwrap().type_.as_deref(),
        Some("OnDelete")
    );
    let pod = spec.template.spec.as_ref().unwrap();
    let ctr = &pod.containers[0];
    assert_eq!(
        ctr.image.as_deref(),
        Some("ghcr.io/shardhouse/shardhouse-node:0.1.0")
    );
    let cmd = ctr.command.as_ref().unwrap().join(" ");
    assert!(cmd.contains(NODE_BINARY), "{cmd}");
    assert!(
        cmd.contains("--advertise-host ${HOSTNAME}.ts-node.prod.svc"),
        "{cmd}"
    );
    let req = ctr.resources.as_ref().unwrap().requests.as_ref().unwrap();
    assert_eq!(req["cpu"].0, "4");
    assert_eq!(req["memory"].0, "8Gi");
    let pvc = &spec.volume_claim_templates.as_ref().unwrap()[0];
    let pvc_spec = pvc.spec.as_ref().unwrap();
    assert_eq!(pvc_spec.storage_class_name.as_deref(), Some("fast"));
    assert_eq!(
        pvc_spec
            .resources
            .as_ref()
            .unwrap()
            .requests
            .as_ref()
            .unwrap()["storage"]
            .0,
        "50Gi"
    );
    // Scaling must not change the pod template (it would roll pods).
    let d3 = desired(&c, &decisions(3));
    assert_eq!(d3.nodes.spec.unwrap().template, spec.template);
}

#[test]
fn backup_credentials_reach_the_node_pods_only_when_named() {
    let secret_refs = |c: &ShardhouseCluster| -> Vec<String> {
        let d = desired(c, &decisions(3));
        let pod = d.nodes.spec.unwrap().template.spec.unwrap();
        pod.containers[0]
            .env_from
            .clone()
            .unwrap_or_default()
            .into_iter()
            .filter_map(|e| e.secret_ref.map(|s| s.name))
            .collect()
    };
    let mut c = cluster("bk");
    assert!(secret_refs(&c).is_empty());
    c.spec.nodes.backup_credentials_secret = Some("s3-creds".into());
    assert_eq!(secret_refs(&c), ["s3-creds"]);
}

#[test]
fn every_object_is_owned_and_labelled() {
    let c = cluster("ts");
    let d = desired(&c, &decisions(3));
    let metas = [
        &d.config.metadata,
        &d.etcd.as_ref().unwrap().metadata,
        &d.etcd_service.as_ref().unwrap().metadata,
        &d.node_service.metadata,
        &d.nodes.metadata,
        &d.router_service.metadata,
        &d.routers.metadata,
        &d.node_pdb.metadata,
        &d.service_monitor.as_ref().unwrap().metadata,
    ];
    for m in metas
        .into_iter()
        .chain(d.dashboards.iter().map(|c| &c.metadata))
    {
        let owners = m.owner_references.as_ref().unwrap();
        assert_eq!(owners.len(), 1);
        assert_eq!(owners[0].kind, "ShardhouseCluster");
        assert_eq!(owners[0].uid, "uid-1");
        assert_eq!(owners[0].controller, Some(true));
        assert_eq!(m.labels.as_ref().unwrap()[LABEL_INSTANCE], "ts");
    }
}

#[test]
fn external_etcd_skips_managed_etcd_and_reaches_config() {
    let mut c = cluster("ts");
    let d = desired(&c, &decisions(3));
    assert!(d.etcd.is_some());
    assert_eq!(
        d.config.data.as_ref().unwrap()["SHARDHOUSE_NODE_ETCD_ENDPOINTS"],
        "http://ts-etcd.prod.svc:2379"
    );
    let etcd = d.etcd.unwrap();
    let ctr = &etcd.spec.unwrap().template.spec.unwrap().containers[0];
    // No shell: etcd images are distroless.
    assert_eq!(ctr.command.as_deref(), Some(&["etcd".to_string()][..]));
    let args = ctr.args.clone().unwrap();
    assert!(
        args.contains(
            &"--initial-cluster=ts-etcd-0=http://ts-etcd-0.ts-etcd.prod.svc:2380".to_string()
        ),
        "{args:?}"
    );
    assert!(args.contains(&"--name=$(POD_NAME)".to_string()));
    assert!(
        args.iter().all(|a| !a.contains("${")),
        "shell syntax in {args:?}"
    );
    assert_eq!(ctr.env.as_ref().unwrap()[0].name, "POD_NAME");

    c.spec.etcd.endpoints = vec!["http://a:2379".into(), "http://b:2379".into()];
    let d = desired(&c, &decisions(3));
    assert!(d.etcd.is_none() && d.etcd_service.is_none());
    let data = d.config.data.unwrap();
    assert_eq!(
        data["SHARDHOUSE_NODE_ETCD_ENDPOINTS"],
        "http://a:2379,http://b:2379"
    );
    assert_eq!(data["SHARDHOUSE_ROUTER_CLUSTER"], "ts");
    assert_eq!(
        data["SHARDHOUSE_NODE_INIT_CLUSTER"],
        "shards=16,rf=3,nodes=3"
    );
}

#[test]
fn router_gets_auth_secret_ports_and_service() {
    let c = cluster("ts");
    let d = desired(&c, &decisions(3));
    let spec = d.routers.spec.unwrap();
    assert_eq!(spec.replicas, Some(2));
    let ctr = &spec.template.spec.unwrap().containers[0];
    let env = ctr.env.as_ref().unwrap();
    assert_eq!(env[0].name, "SHARDHOUSE_ROUTER_AUTH_TOKEN");
    let ports: Vec<i32> = ctr
        .ports
        .as_ref()
        .unwrap()
        .iter()
        .map(|p| p.container_port)
        .collect();
    assert_eq!(ports, vec![8086, 8087]);
    let svc_ports: Vec<i32> = d
        .router_service
        .spec
        .unwrap()
        .ports
        .unwrap()
        .iter()
        .map(|p| p.port)
        .collect();
    assert_eq!(svc_ports, vec![8086, 8087]);
}

#[test]
fn node_pods_fit_a_real_cluster() {
    let mut c = cluster("ts");
    let sts = desired(&c, &decisions(3)).nodes;
    let pod = sts.spec.as_ref().unwrap().template.spec.clone().unwrap();
    let sc = pod.security_context.as_ref().unwrap();
    assert_eq!(sc.fs_group, Some(65532));
    assert_eq!(sc.fs_group_change_policy.as_deref(), Some("OnRootMismatch"));
    let aa = pod
        .affinity
        .as_ref()
        .unwrap()
        .pod_anti_affinity
        .as_ref()
        .unwrap();
    let pref = aa
        .preferred_during_scheduling_ignored_during_execution
        .as_ref()
        .unwrap();
    assert_eq!(
        pref[0].pod_affinity_term.topology_key,
        "kubernetes.io/hostname"
    );
    assert_eq!(pod.topology_spread_constraints.as_ref().unwrap().len(), 1);
    let ctr = &pod.containers[0];
    let startup = ctr.startup_probe.as_ref().unwrap();
    assert_eq!(
        startup.http_get.as_ref().unwrap().path.as_deref(),
        Some("/health")
    );
    assert!(startup.period_seconds.unwrap() * startup.failure_threshold.unwrap() >= 300);
    let ready = ctr.readiness_probe.as_ref().unwrap();
    assert_eq!(
        ready.http_get.as_ref().unwrap().path.as_deref(),
        Some("/ready")
    );
    assert!(
        ready.timeout_seconds.unwrap() >= 3,
        "/ready asks the leaders"
    );
    // Guaranteed QoS by default; the pool follows the CPU limit.
    let r = ctr.resources.as_ref().unwrap();
    assert_eq!(r.limits.as_ref().unwrap()["cpu"].0, "4");
    assert_eq!(r.limits.as_ref().unwrap()["memory"].0, "8Gi");
    let env = ctr.env.as_ref().unwrap();
    let pool = env
        .iter()
        .find(|e| e.name == "SHARDHOUSE_NODE_POOL_SIZE")
        .unwrap();
    let rf = pool
        .value_from
        .as_ref()
        .unwrap()
        .resource_field_ref
        .as_ref()
        .unwrap();
    assert_eq!(rf.resource, "limits.cpu");
    let inflight = env
        .iter()
        .find(|e| e.name == "SHARDHOUSE_NODE_MAX_INFLIGHT_BYTES")
        .unwrap();
    assert_eq!(
        inflight.value.as_deref(),
        Some("536870912"),
        "8Gi / 8 capped at 512 MiB"
    );
    // Scale-in deletes the drained pods' volumes.
    let policy = sts
        .spec
        .as_ref()
        .unwrap()
        .persistent_volume_claim_retention_policy
        .clone()
        .unwrap();
    assert_eq!(policy.when_scaled.as_deref(), Some("Delete"));

    // An override without a CPU limit: the pool stays at `cores`.
    c.spec.nodes.resources = Some(Resources {
        requests: BTreeMap::from([
            ("cpu".into(), "250m".into()),
            ("memory".into(), "1Gi".into()),
        ]),
        limits: BTreeMap::from([("memory".into(), "1Gi".into())]),
    });
    c.spec.nodes.anti_affinity = AntiAffinity::Required;
    let pod = desired(&c, &decisions(3))
        .nodes
        .spec
        .unwrap()
        .template
        .spec
        .unwrap();
    let ctr = &pod.containers[0];
    assert_eq!(
        ctr.resources.as_ref().unwrap().requests.as_ref().unwrap()["cpu"].0,
        "250m"
    );
    let env = ctr.env.as_ref().unwrap();
    assert!(env.iter().all(|e| e.name != "SHARDHOUSE_NODE_POOL_SIZE"));
    assert_eq!(env[0].value.as_deref(), Some("134217728"), "1Gi / 8");
    assert_eq!(env[1].name, "SHARDHOUSE_NODE_WAL_WRITE_BUFFER_BYTES");
    assert_eq!(env[1].value.as_deref(), Some("33554432"), "1Gi / 32");
    let aa = pod.affinity.unwrap().pod_anti_affinity.unwrap();
    assert!(aa
        .required_during_scheduling_ignored_during_execution
        .is_some());
}

#[test]
fn quantities_parse() {
    assert_eq!(quantity_bytes("4Gi"), Some(4 << 30));
    assert_eq!(quantity_bytes("512Mi"), Some(512 << 20));
    assert_eq!(quantity_bytes("1G"), Some(1_000_000_000));
    assert_eq!(quantity_bytes("1e3"), Some(1000));
    assert_eq!(quantity_bytes("100"), Some(100));
    assert_eq!(quantity_bytes("lots"), None);
    assert_eq!(node_inflight_bytes(Some("128Mi")), 32 << 20, "floor");
    assert_eq!(node_inflight_bytes(None), 512 << 20);
    assert_eq!(node_wal_write_buffer_bytes(Some("8Gi")), 256 << 20, "cap");
    assert_eq!(node_wal_write_buffer_bytes(Some("128Mi")), 8 << 20, "floor");
    assert_eq!(node_wal_write_buffer_bytes(Some("2Gi")), 64 << 20);
    assert_eq!(node_wal_write_buffer_bytes(None), 256 << 20);
}

#[test]
fn router_service_type_and_monitor_labels_are_configurable() {
    let mut c = cluster("ts");
    assert_eq!(
        desired(&c, &decisions(3))
            .router_service
            .spec
            .unwrap()
            .type_
            .as_deref(),
        Some("ClusterIP")
    );
    c.spec.routers.service = RouterServiceSpec {
        type_: "NodePort".into(),
        http_node_port: Some(30086),
        annotations: BTreeMap::from([("a".into(), "b".into())]),
        ..Default::default()
    };
    c.spec.monitoring.service_monitor_labels =
        BTreeMap::from([("release".into(), "kube-prometheus-stack".into())]);
    let d = desired(&c, &decisions(3));
    let svc = d.router_service;
    assert_eq!(svc.metadata.annotations.unwrap()["a"], "b");
    let spec = svc.spec.unwrap();
    assert_eq!(spec.type_.as_deref(), Some("NodePort"));
    assert_eq!(spec.ports.unwrap()[0].node_port, Some(30086));
    let sm = d.service_monitor.unwrap();
    assert_eq!(
        sm.metadata.labels.unwrap()["release"],
        "kube-prometheus-stack"
    );
    c.spec.monitoring.service_monitor = false;
    assert!(desired(&c, &decisions(3)).service_monitor.is_none());
}

#[test]
fn dashboards_and_service_monitor_are_optional_extras() {
    let c = cluster("ts");
    let mut dec = decisions(3);
    dec.service_monitor = false;
    let d = desired(&c, &dec);
    assert!(d.service_monitor.is_none());
    assert_eq!(d.dashboards.len(), dashboards::ALL.len());
    for cm in &d.dashboards {
        assert_eq!(
            cm.metadata.labels.as_ref().unwrap()["grafana_dashboard"],
            "1"
        );
        let (_, body) = cm.data.as_ref().unwrap().iter().next().unwrap();
        serde_json::from_str::<Value>(body).expect("dashboard JSON");
    }
    assert_eq!(
        d.node_pdb.spec.unwrap().max_unavailable,
        Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(1))
    );
}
