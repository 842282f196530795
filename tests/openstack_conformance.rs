//! Conformance of the simulated Nova to the real one: the same requests (refused creates,
//! list filters, tags, reboot, lists and version documents) go to the simulator and, when
//! the real-OpenStack tier runs (`NODEWRIGHT_REAL_OPENSTACK`, see tests/openstack_real.rs),
//! to the real Nova; status codes, messages and the shape of the answers (their key sets,
//! two levels deep) must match. Without the tier the simulator's answers are still checked
//! against the real answers recorded here.

use nodewright_testkit::real_os;

use std::collections::BTreeSet;
use std::time::Duration;

use nodewright::sim::openstack::{SimOpenStack, SimOpenStackOptions};
use serde_json::{json, Value};

/// A Nova to talk to: its compute URL, a token, and the ids the requests name.
struct Nova {
    compute: String,
    token: String,
    flavor: String,
    image: String,
    http: reqwest::Client,
}

async fn token(
    http: &reqwest::Client,
    auth_url: &str,
    user: &str,
    password: &str,
    domain: &str,
    project: &str,
) -> (String, String) {
    let body = json!({ "auth": {
        "identity": { "methods": ["password"], "password": { "user": {
            "name": user, "domain": { "name": domain }, "password": password } } },
        "scope": { "project": { "name": project, "domain": { "name": domain } } },
    } });
    let r = http
        .post(format!("{}/auth/tokens", auth_url.trim_end_matches('/')))
        .json(&body)
        .send()
        .await
        .expect("Keystone answers");
    assert_eq!(r.status(), 201, "token");
    let token = r
        .headers()
        .get("x-subject-token")
        .and_then(|v| v.to_str().ok())
        .expect("X-Subject-Token")
        .to_string();
    let v: Value = r.json().await.expect("token json");
    let compute = v["token"]["catalog"]
        .as_array()
        .expect("catalog")
        .iter()
        .find(|s| s["type"] == "compute")
        .and_then(|s| {
            s["endpoints"]
                .as_array()?
                .iter()
                .find(|e| e["interface"] == "public")
        })
        .and_then(|e| e["url"].as_str())
        .expect("a public compute endpoint")
        .trim_end_matches('/')
        .to_string();
    (compute, token)
}

impl Nova {
    async fn send(&self, method: &str, path: &str, mv: &str, body: Option<&Value>) -> (u16, Value) {
        let url = format!("{}{path}", self.compute);
        let req = match method {
            "GET" => self.http.get(url),
            "PUT" => self.http.put(url),
            "DELETE" => self.http.delete(url),
            _ => self.http.post(url),
        };
        let mut req = req
            .header("X-Auth-Token", &self.token)
            .header("OpenStack-API-Version", format!("compute {mv}"));
        if let Some(b) = body {
            req = req.json(b);
        }
        let r = req.send().await.expect("Nova answers");
        let status = r.status().as_u16();
        let text = r.text().await.expect("body");
        (status, serde_json::from_str(&text).unwrap_or(Value::Null))
    }

    /// Creates a server on no network and waits until it is ACTIVE.
    async fn server(&self, name: &str) -> String {
        let body = json!({ "server": { "name": name, "flavorRef": self.flavor,
            "imageRef": self.image, "networks": "none", "tags": ["a", "b"] } });
        let (status, v) = self.send("POST", "/servers", "2.67", Some(&body)).await;
        assert_eq!(status, 202, "{v}");
        let id = v["server"]["id"].as_str().expect("id").to_string();
        for _ in 0..300 {
            let (_, v) = self
                .send("GET", &format!("/servers/{id}"), "2.67", None)
                .await;
            if v["server"]["status"] == "ACTIVE" {
                return id;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        panic!("server {id} never went ACTIVE");
    }
}

/// The key paths of a JSON answer, two levels deep (`servers[].id`, `server.flavor`).
fn shape(v: &Value) -> BTreeSet<String> {
    fn walk(v: &Value, prefix: &str, depth: usize, out: &mut BTreeSet<String>) {
        let v = match v {
            Value::Array(items) => match items.first() {
                Some(first) => first,
                None => return,
            },
            other => other,
        };
        let Value::Object(m) = v else { return };
        for (k, child) in m {
            let path = format!("{prefix}{k}");
            out.insert(path.clone());
            if depth > 0 {
                let sep = if child.is_array() { "[]." } else { "." };
                walk(child, &format!("{path}{sep}"), depth - 1, out);
            }
        }
    }
    let mut out = BTreeSet::new();
    walk(v, "", 2, &mut out);
    out
}

/// The error message of a Nova answer (`{"badRequest": {"message": ...}}`), if any.
fn message(v: &Value) -> Option<String> {
    let (_, inner) = v.as_object()?.iter().next()?;
    inner["message"].as_str().map(str::to_string)
}

struct Case {
    what: &'static str,
    method: &'static str,
    path: String,
    mv: &'static str,
    body: Option<Value>,
    status: u16,
    /// Real Nova's message (`{server}` stands for the server id); `None` for a success.
    message: Option<String>,
}

fn cases(n: &Nova) -> Vec<Case> {
    let long = "a".repeat(256);
    let create = |extra: Value| {
        let mut s = json!({ "name": "conf-x", "flavorRef": n.flavor, "imageRef": n.image,
            "networks": "none" });
        if let (Some(s), Some(e)) = (s.as_object_mut(), extra.as_object()) {
            s.extend(e.clone());
        }
        Some(json!({ "server": s }))
    };
    let many: serde_json::Map<String, Value> =
        (0..129).map(|i| (format!("k{i}"), json!("v"))).collect();
    let case = |what, method, path: &str, mv, body, status, message: Option<String>| Case {
        what,
        method,
        path: path.to_string(),
        mv,
        body,
        status,
        message,
    };
    vec![
        case("name over 255", "POST", "/servers", "2.67", create(json!({ "name": long })), 400,
            Some(format!("Invalid input for field/attribute name. Value: {long}. '{long}' is too long"))),
        case("name with a leading space", "POST", "/servers", "2.67", create(json!({ "name": " x" })), 400,
            Some("An invalid 'name' value was provided. The name must be: printable characters. Can not start or end with whitespace.".into())),
        case("metadata key outside the pattern", "POST", "/servers", "2.67",
            create(json!({ "metadata": { "a/b": "v" } })), 400,
            Some("Invalid input for field/attribute metadata. Value: {'a/b': 'v'}. 'a/b' does not match any of the regexes: '^[a-zA-Z0-9-_:. ]{1,255}$'".into())),
        case("metadata key over 255", "POST", "/servers", "2.67",
            create(json!({ "metadata": { long.clone(): "v" } })), 400,
            Some(format!("Invalid input for field/attribute metadata. Value: {{'{long}': 'v'}}. '{long}' does not match any of the regexes: '^[a-zA-Z0-9-_:. ]{{1,255}}$'"))),
        case("metadata value over 255", "POST", "/servers", "2.67",
            create(json!({ "metadata": { "k": long } })), 400,
            Some(format!("Invalid input for field/attribute k. Value: {long}. '{long}' is too long"))),
        case("metadata value not a string", "POST", "/servers", "2.67",
            create(json!({ "metadata": { "a": 1 } })), 400,
            Some("Invalid input for field/attribute a. Value: 1. 1 is not of type 'string'".into())),
        case("129 metadata items", "POST", "/servers", "2.67",
            create(json!({ "metadata": many })), 403,
            Some("Maximum number of metadata items exceeds 128".into())),
        case("unknown key pair", "POST", "/servers", "2.67",
            create(json!({ "key_name": "no-such-key" })), 400,
            Some("Invalid key_name provided.".into())),
        case("unknown status filter", "GET", "/servers?status=FOO", "2.67", None, 400,
            Some("Invalid status value".into())),
        case("unknown status filter before 2.38", "GET", "/servers?status=FOO", "2.37", None, 200, None),
        case("invalid name regex", "GET", "/servers?name=%5B", "2.67", None, 400,
            Some("Invalid input for query parameters name. Value: [. '[' is not a 'regex'".into())),
        case("plain server list by name regex", "GET", "/servers?name=%5Econf-s", "2.67", None, 200, None),
        case("detailed list by tags", "GET", "/servers/detail?tags=a,b&name=%5Econf-s", "2.67", None, 200, None),
        case("server", "GET", "/servers/{server}", "2.79", None, 200, None),
        case("server, old microversion", "GET", "/servers/{server}", "2.1", None, 200, None),
        case("plain flavor list", "GET", "/flavors", "2.1", None, 200, None),
        case("detailed flavor list", "GET", "/flavors/detail", "2.75", None, 200, None),
        case("detailed flavor list before 2.75", "GET", "/flavors/detail", "2.1", None, 200, None),
        case("flavor extra specs", "GET", &format!("/flavors/{}/os-extra_specs", n.flavor), "2.61", None, 200, None),
        case("tags", "GET", "/servers/{server}/tags", "2.67", None, 200, None),
        case("tags before 2.26", "GET", "/servers/{server}/tags", "2.25", None, 404,
            Some("The resource could not be found.".into())),
        case("missing tag", "GET", "/servers/{server}/tags/zz", "2.67", None, 404,
            Some("Server {server} has no tag 'zz'".into())),
        case("invalid tag", "PUT", "/servers/{server}/tags/a%2Cb", "2.67", None, 400,
            Some("Tag 'a,b' is invalid. It must be a non empty string without characters '/' and ','. Validation error message: 'a,b' does not match '^[^,/]*$'".into())),
        case("reboot of an unknown type", "POST", "/servers/{server}/action", "2.67",
            Some(json!({ "reboot": { "type": "bogus" } })), 400,
            Some("Invalid input for field/attribute type. Value: bogus. 'bogus' is not one of ['HARD', 'Hard', 'hard', 'SOFT', 'Soft', 'soft']".into())),
        case("reboot without a type", "POST", "/servers/{server}/action", "2.67",
            Some(json!({ "reboot": {} })), 400,
            Some("Invalid input for field/attribute reboot. Value: {}. 'type' is a required property".into())),
    ]
}

/// What one Nova answered to every case.
async fn run(n: &Nova, server: &str) -> Vec<(u16, Value)> {
    let mut out = Vec::new();
    for c in cases(n) {
        let path = c.path.replace("{server}", server);
        out.push(n.send(c.method, &path, c.mv, c.body.as_ref()).await);
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn simulated_nova_answers_as_real_nova_does() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(60))
        .build()
        .expect("client");
    let sim = SimOpenStack::start(SimOpenStackOptions::default())
        .await
        .expect("simulator");
    let o = sim.options().clone();
    let (compute, tok) = token(
        &http,
        &sim.auth_url(),
        &o.username,
        &o.password,
        &o.domain,
        &o.project,
    )
    .await;
    let simulated = Nova {
        compute,
        token: tok,
        flavor: o.flavors[0].id.clone(),
        image: o.images[0].id.clone(),
        http: http.clone(),
    };
    let sim_server = simulated.server("conf-s").await;
    let sim_answers = run(&simulated, &sim_server).await;

    let mut mismatches = Vec::new();
    for (c, (status, v)) in cases(&simulated).iter().zip(&sim_answers) {
        let want = c
            .message
            .as_ref()
            .map(|m| m.replace("{server}", &sim_server));
        if *status != c.status || (want.is_some() && message(v) != want) {
            mismatches.push(format!(
                "simulator, {}: {status} {:?}, real Nova answers {} {want:?}",
                c.what,
                message(v),
                c.status
            ));
        }
    }

    if let Some(os) = real_os::real_os("simulated_nova_answers_as_real_nova_does") {
        let text = std::fs::read_to_string(&os.password).expect("credentials");
        let creds: std::collections::BTreeMap<String, String> =
            serde_yaml::from_str(&text).expect("OS_* yaml");
        let get = |k: &str| creds.get(k).cloned().unwrap_or_default();
        let (compute, tok) = token(
            &http,
            &get("OS_AUTH_URL"),
            &get("OS_USERNAME"),
            &get("OS_PASSWORD"),
            &get("OS_USER_DOMAIN_NAME"),
            &get("OS_PROJECT_NAME"),
        )
        .await;
        let real = Nova {
            compute,
            token: tok,
            flavor: os.id("FLAVOR_SMALL_ID"),
            image: os.id("IMAGE_ID"),
            http: http.clone(),
        };
        let name = format!("conf-s-{}", std::process::id());
        let real_server = real.server(&name).await;
        let real_answers = run(&real, &real_server).await;
        println!(
            "compared {} requests with real Nova at {}",
            real_answers.len(),
            real.compute
        );
        real.send("DELETE", &format!("/servers/{real_server}"), "2.67", None)
            .await;
        for ((c, (ss, sv)), (rs, rv)) in cases(&simulated)
            .iter()
            .zip(&sim_answers)
            .zip(&real_answers)
        {
            let sm = message(sv).map(|m| m.replace(&sim_server, "{server}"));
            let rm = message(rv).map(|m| m.replace(&real_server, "{server}"));
            if ss != rs || sm != rm {
                mismatches.push(format!(
                    "{}: simulator {ss} {sm:?}, real Nova {rs} {rm:?}",
                    c.what
                ));
            }
            let (a, b) = (shape(sv), shape(rv));
            if a != b {
                mismatches.push(format!(
                    "{}: keys only the simulator has {:?}, only real Nova has {:?}",
                    c.what,
                    a.difference(&b).collect::<Vec<_>>(),
                    b.difference(&a).collect::<Vec<_>>()
                ));
            }
        }
    }
    assert!(mismatches.is_empty(), "{mismatches:#?}");
}
