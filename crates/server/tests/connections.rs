//! The server's connections and lifecycle, in process: a connection's
//! transactions end with it, TLS and the rule for public addresses, the
//! standard health and reflection services, and shutdown (open
//! transactions finish; idle clients do not hold it).

use std::time::Duration;

use crate::common::*;
use milliscale_client::Client;
use milliscale_server::{Backend, ServerOptions, Tokens};
use tonic::Code;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_goes_away_leaves_no_transaction_open() {
    let s = start(Backend::Writer(writer("memory://").await), |_| {}).await; // idle timeout 30 s
    let c = client(&s).await;
    c.create_table("t").await.expect("create");
    let mut mine = c.begin().await.expect("begin");
    mine.put("t", b"mine", b"1").await.expect("put");
    // Another client, on a runtime of its own, begins a transaction,
    // writes a key and goes away: its runtime stops (the socket closes
    // with it) before the transaction is dropped, so the client sends no
    // abort.
    let addr = s.local_addr().to_string();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("rt");
        let tx = rt.block_on(async {
            let c = Client::connect(addr).await.expect("connect");
            let mut tx = c.begin().await.expect("begin");
            tx.put("t", b"k", b"abandoned").await.expect("put");
            tx
        });
        drop(rt);
        drop(tx);
    })
    .join()
    .expect("the client's thread");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while s.open_transactions() > 1 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the closed connection's transaction is open"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // Its key is free, its write gone; the other connection's transaction
    // is untouched.
    let mut t = c.begin().await.expect("begin");
    assert_eq!(t.get("t", b"k").await.expect("get"), None);
    t.put("t", b"k", b"mine").await.expect("no conflict with the aborted one");
    t.commit().await.expect("commit");
    mine.commit().await.expect("the open connection's transaction commits");
    assert_eq!(c.get("t", b"mine").await.expect("get"), Some(b"1".to_vec()));
    s.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_does_not_wait_for_a_client_that_runs_only_inside_its_calls() {
    let s = start(Backend::Writer(writer("memory://").await), |o| {
        o.grace = Duration::from_secs(10);
    })
    .await;
    client(&s).await.create_table("t").await.expect("create");
    // A client as the Python package runs one: on a current-thread runtime
    // driven only inside its calls. It made a call and a batch (the batch
    // opened the stream), and now sits idle, its runtime not running: it
    // cannot answer the server's goodbye.
    let addr = s.local_addr().to_string();
    let (idle_tx, idle_rx) = std::sync::mpsc::channel::<()>();
    let (ready_tx, ready_rx) = std::sync::mpsc::channel::<()>();
    let idle = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("rt");
        let c = rt.block_on(async {
            let c = Client::connect(addr).await.expect("connect");
            c.put("t", b"k", b"v").await.expect("a batch on the stream");
            c.list_tables().await.expect("a call");
            c
        });
        ready_tx.send(()).expect("ready");
        let _ = idle_rx.recv();
        drop(c);
    });
    ready_rx.recv().expect("the idle client is ready");
    let report = s.shutdown().await;
    assert!(report.took < Duration::from_secs(3), "shutdown took {:?}", report.took);
    idle_tx.send(()).expect("end the idle client");
    idle.join().expect("the idle client's thread");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_lets_open_transactions_finish_and_refuses_new_ones() {
    let db = writer("memory://").await;
    let s = start(Backend::Writer(db.clone()), |o| o.grace = Duration::from_secs(5)).await;
    let c = client(&s).await;
    c.create_table("t").await.expect("create");
    let mut tx = c.begin().await.expect("begin");
    tx.put("t", b"k", b"v").await.expect("put");
    let stopping = tokio::spawn(s.shutdown());
    tokio::time::sleep(Duration::from_millis(100)).await;
    let e = c.begin().await.expect_err("no new transactions");
    assert_eq!((e.code(), e.kind()), (Code::Unavailable, "closed"));
    tx.commit().await.expect("the open one finishes");
    let report = stopping.await.expect("shutdown");
    assert_eq!((report.finished, report.aborted), (1, 0));
    assert_eq!(db.get(&db.open_table("t").expect("t"), b"k").expect("get"), Some(b"v".to_vec()));
    db.close().await.expect("close");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_standard_health_and_reflection_services_answer() {
    use tonic_health::pb::health_check_response::ServingStatus;
    use tonic_health::pb::{HealthCheckRequest, health_client::HealthClient};
    use tonic_reflection::pb::v1::ServerReflectionRequest;
    use tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient;
    use tonic_reflection::pb::v1::server_reflection_request::MessageRequest;
    use tonic_reflection::pb::v1::server_reflection_response::MessageResponse;

    let s = start(Backend::Writer(writer("memory://").await), |o| {
        o.tokens = Tokens::parse(&format!("read-write:{RW}")).expect("tokens");
    })
    .await;
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{}", s.local_addr()))
        .expect("endpoint")
        .connect()
        .await
        .expect("connect");
    // Health, without a token: the server, the service, and no other.
    let health = HealthClient::new(channel.clone());
    let status = |service: &str| {
        let mut h = health.clone();
        let service = service.to_owned();
        async move { h.check(HealthCheckRequest { service }).await.map(|r| r.into_inner().status) }
    };
    assert_eq!(status("").await.expect("the server"), ServingStatus::Serving as i32);
    let named = status("milliscale.v1.Milliscale").await.expect("the service");
    assert_eq!(named, ServingStatus::Serving as i32);
    assert_eq!(status("nope.v1.Nothing").await.expect_err("unknown").code(), Code::NotFound);

    // Reflection: the services, and the schema of ours.
    let mut reflection = ServerReflectionClient::new(channel.clone());
    let ask = |r: MessageRequest| ServerReflectionRequest {
        host: String::new(),
        message_request: Some(r),
    };
    let requests = tokio_stream::iter(vec![
        ask(MessageRequest::ListServices(String::new())),
        ask(MessageRequest::FileContainingSymbol("milliscale.v1.Milliscale".into())),
    ]);
    let mut answers =
        reflection.server_reflection_info(requests).await.expect("reflection").into_inner();
    let Some(MessageResponse::ListServicesResponse(list)) =
        answers.message().await.expect("answer").and_then(|a| a.message_response)
    else {
        panic!("no list of services");
    };
    let names: Vec<String> = list.service.into_iter().map(|s| s.name).collect();
    for service in ["milliscale.v1.Milliscale", "grpc.health.v1.Health"] {
        assert!(names.contains(&service.to_owned()), "{service} not in {names:?}");
    }
    let Some(MessageResponse::FileDescriptorResponse(files)) =
        answers.message().await.expect("answer").and_then(|a| a.message_response)
    else {
        panic!("no schema");
    };
    assert!(!files.file_descriptor_proto.is_empty());

    // Shutting down (an open transaction holds it in its grace period):
    // NOT_SERVING at once.
    let c = Client::builder(s.local_addr().to_string()).token(RW).connect().await.expect("c");
    let tx = c.begin().await.expect("begin");
    let stopping = tokio::spawn(s.shutdown());
    let deadline = tokio::time::Instant::now() + Duration::from_secs(2);
    while status("").await.expect("health") != ServingStatus::NotServing as i32 {
        assert!(tokio::time::Instant::now() < deadline, "still SERVING while shutting down");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        status("milliscale.v1.Milliscale").await.expect("health"),
        ServingStatus::NotServing as i32
    );
    tx.commit().await.expect("the open transaction finishes");
    stopping.await.expect("shutdown");
}

#[test]
fn a_public_address_needs_tls_and_tokens_or_insecure() {
    let mut o = ServerOptions::new("0.0.0.0:7878".parse().expect("addr"));
    let e = o.check().expect_err("plaintext on every interface");
    assert!(e.contains("TLS") && e.contains("tokens") && e.contains("--insecure"), "{e}");
    o.insecure = true;
    o.check().expect("insecure says so");
    assert!(ServerOptions::new(local()).check().is_ok());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_serves_a_client_that_trusts_the_certificate() {
    let cert = rcgen::generate_simple_self_signed(vec!["localhost".into()]).expect("cert");
    let (cert_pem, key_pem) = (cert.cert.pem(), cert.signing_key.serialize_pem());
    let s = start(Backend::Writer(writer("memory://").await), |o| {
        o.tls = Some(milliscale_server::TlsIdentity {
            cert_pem: cert_pem.clone().into_bytes(),
            key_pem: key_pem.into_bytes(),
        });
    })
    .await;
    let port = s.local_addr().port();
    // The certificate's name is the address's host by default ...
    let c = Client::builder(format!("localhost:{port}"))
        .tls(cert_pem.clone().into_bytes())
        .connect()
        .await
        .expect("connect over TLS");
    c.create_table("t").await.expect("create over TLS");
    // ... or the one given, for an address that is not that name.
    let by_ip = |domain: Option<&str>| {
        let mut b = Client::builder(format!("127.0.0.1:{port}")).tls(cert_pem.clone().into_bytes());
        if let Some(d) = domain {
            b = b.tls_domain(d);
        }
        async move { b.connect().await?.list_tables().await }
    };
    assert_eq!(by_ip(Some("localhost")).await.expect("named"), vec!["t".to_owned()]);
    by_ip(None).await.expect_err("the certificate is not for 127.0.0.1");
    let plain = Client::connect(format!("http://127.0.0.1:{port}")).await;
    let refused = match plain {
        Err(_) => true,
        Ok(p) => p.list_tables().await.is_err(),
    };
    assert!(refused, "plaintext reached a TLS server");
    s.shutdown().await;
}
