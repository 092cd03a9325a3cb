//! What orchestrators and proxies act on: the URL the infra publishes, against a real
//! redis-server and the fake daemon of the limiter's tests.

mod common;

use std::time::Duration;

use common::{flags, limit, redis_url, rules, unique, FakeDaemon, Gateway};
use shareplane_gateway::config::FileConfig;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_given_the_published_rules_url_loads_rules_and_reports_demand() {
    let test = "a_gateway_given_the_published_rules_url_loads_rules_and_reports_demand";
    let Some(redis) = redis_url(test) else {
        return;
    };
    let k = unique("published");
    let daemon = FakeDaemon::start(rules(1, vec![limit(&k, 10.0, 20.0)])).await;
    // What the CDK and Terraform publish as rulesUrl (with a trailing slash for good measure).
    let mut f = flags(&daemon, &redis);
    f.rules = Some(format!("{}/v1/rules/", daemon.url));
    let gw = Gateway::start(FileConfig::default(), f).await;
    gw.ready().await;
    let r = reqwest::get(format!("{}/v1/check?limit={k}", gw.http))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(r.status().as_u16(), 200);
    // The demand reporter posts to the same daemon's /v1/demand.
    for _ in 0..200 {
        if daemon.demand(&k) > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert_eq!(daemon.demand(&k), 1, "no demand reached the daemon");
    gw.stop().await;
}
