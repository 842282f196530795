//! The simulator's API shapes, read with a plain HTTP client.

use super::*;

// ---------------------------------------------------------------------------
// The simulator's API shapes, with a plain HTTP client

#[tokio::test]
async fn simulator_matches_api_shapes() {
    let sim = SimOpenStack::start(SimOpenStackOptions::default())
        .await
        .unwrap();
    let http = raw_client();
    let (token, body) = raw_token(&sim, &http).await;
    let catalog = body["token"]["catalog"].as_array().unwrap();
    for ty in ["compute", "image", "network"] {
        let svc = catalog.iter().find(|s| s["type"] == ty).unwrap();
        let ifaces: Vec<&str> = svc["endpoints"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["interface"].as_str().unwrap())
            .collect();
        assert_eq!(ifaces, ["public", "internal"], "{ty}");
        assert_eq!(svc["endpoints"][0]["region_id"], "RegionOne");
    }
    assert!(body["token"]["expires_at"].as_str().unwrap().ends_with('Z'));
    let compute = catalog.iter().find(|s| s["type"] == "compute").unwrap()["endpoints"][0]["url"]
        .as_str()
        .unwrap()
        .to_string();

    // No or bad token: 401.
    let r = http
        .get(format!("{compute}/servers/detail"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    let r = http
        .get(format!("{compute}/servers/detail"))
        .header("X-Auth-Token", "bogus")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);

    // Invalid base64 user data: 400 badRequest.
    let o = sim.options();
    let r = http
        .post(format!("{compute}/servers"))
        .header("X-Auth-Token", &token)
        .header("OpenStack-API-Version", "compute 2.79")
        .json(&serde_json::json!({ "server": {
            "name": "x", "flavorRef": "2", "imageRef": o.images[0].id, "networks": "none",
            "user_data": "***not base64***" } }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    assert_eq!(r.headers()["openstack-api-version"], "compute 2.79");
    let v: serde_json::Value = r.json().await.unwrap();
    assert!(v["badRequest"]["message"]
        .as_str()
        .unwrap()
        .contains("base 64"));

    // Unknown flavor, and missing networks at 2.37+.
    let r = http
        .post(format!("{compute}/servers"))
        .header("X-Auth-Token", &token)
        .header("OpenStack-API-Version", "compute 2.79")
        .json(&serde_json::json!({ "server": {
            "name": "x", "flavorRef": "m1.small", "imageRef": o.images[0].id, "networks": "none" } }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    let r = http
        .post(format!("{compute}/servers"))
        .header("X-Auth-Token", &token)
        .header("OpenStack-API-Version", "compute 2.79")
        .json(&serde_json::json!({ "server": {
            "name": "x", "flavorRef": "2", "imageRef": o.images[0].id } }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);

    // Unsupported microversion: 406.
    let r = http
        .get(format!("{compute}/flavors/detail"))
        .header("X-Auth-Token", &token)
        .header("OpenStack-API-Version", "compute 3.0")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 406);

    // Create, then the embedded flavor only from 2.47 on.
    let r = http
        .post(format!("{compute}/servers"))
        .header("X-Auth-Token", &token)
        .header("OpenStack-API-Version", "compute 2.79")
        .json(&serde_json::json!({ "server": {
            "name": "x", "flavorRef": "2", "imageRef": o.images[0].id, "networks": "none" } }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 202);
    let v: serde_json::Value = r.json().await.unwrap();
    let id = v["server"]["id"].as_str().unwrap().to_string();
    let show = |mv: &'static str| {
        http.get(format!("{compute}/servers/{id}"))
            .header("X-Auth-Token", &token)
            .header("X-OpenStack-Nova-API-Version", mv)
            .send()
    };
    let new: serde_json::Value = show("2.79").await.unwrap().json().await.unwrap();
    assert_eq!(new["server"]["flavor"]["ram"], 2048);
    assert_eq!(new["server"]["status"], "BUILD");
    let old: serde_json::Value = show("2.1").await.unwrap().json().await.unwrap();
    assert_eq!(old["server"]["flavor"]["id"], "2");

    // Delete: 204, again 204 while it is still being deleted, then 404 itemNotFound.
    for want in [204, 204, 404] {
        if want == 404 {
            tokio::time::sleep(sim.options().delete_delay + Duration::from_millis(100)).await;
        }
        let r = http
            .delete(format!("{compute}/servers/{id}"))
            .header("X-Auth-Token", &token)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), want);
        if want == 404 {
            let v: serde_json::Value = r.json().await.unwrap();
            assert_eq!(v["itemNotFound"]["code"], 404);
        }
    }
}
