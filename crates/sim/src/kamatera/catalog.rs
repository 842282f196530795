//! What the account may create, as the real API lists it (shapes from the cloudcli
//! service's schema and the answers Apache Libcloud's and Kamatera's Terraform provider
//! read):
//!
//! - `GET /service/server`: the server options (`datacenters` as `{"ID": "ID: Country"}`,
//!   `cpu`, `ram`, `disk`, `diskImages` per datacenter as `{"description", "id", ...}`,
//!   `traffic`, `networks`, `billing`); the service resolves an image *name* at create
//!   through `diskImages`;
//! - `GET /service/server?datacenter=1`: `[{"id", "name" (country), "category",
//!   "subCategory" (city)}]`;
//! - `GET /service/server?images=1&datacenter=DC`: `[{"datacenter", "os", "id", "name",
//!   "code", "osDiskSizeGB", "ramMBMin"}]`;
//! - `GET /service/server?capabilities=1&datacenter=DC`: `{"cpuTypes": [{"id", "name",
//!   "description", "cpuCores", "ramMB"}], "diskSizeGB", "monthlyTrafficPackage",
//!   "defaultMonthlyTrafficPackage"}`;
//! - `GET /service/server?sizes=1&datacenter=DC`: `[{"id", "ramMB", "cpuCores", "cpuType",
//!   "diskSizeGB", "monthlyTrafficPackage"}]`.
//!
//! The simulator's catalogue is small and the same in every datacenter it serves.

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Map, Value};

use super::calls::error;
use super::Shared;

/// One disk image: its cloudcli name (`description` in the options), its id suffix (the
/// id is `DC:` + this), its long name, code and OS.
pub struct Image {
    pub description: &'static str,
    pub id_suffix: &'static str,
    pub name: &'static str,
    pub code: &'static str,
    pub os: &'static str,
    pub disk_gb: u32,
}

pub const IMAGES: &[Image] = &[
    Image {
        description: "ubuntu_server_24.04_64-bit",
        id_suffix: "6000C2903e2b1f7d8a4c5e6f70819203",
        name: "Ubuntu Server version 24.04 LTS (noble) 64-bit",
        code: "24.04 64bit",
        os: "Ubuntu",
        disk_gb: 10,
    },
    Image {
        description: "ubuntu_server_22.04_64-bit",
        id_suffix: "6000C2907a1c2d3e4f5a6b7c8d9e0f12",
        name: "Ubuntu Server version 22.04 LTS (jammy) 64-bit",
        code: "22.04 64bit",
        os: "Ubuntu",
        disk_gb: 10,
    },
    Image {
        description: "debian_server_12_64-bit",
        id_suffix: "6000C29d4e5f60718293a4b5c6d7e8f9",
        name: "Debian version 12 (bookworm) 64-bit",
        code: "12 64bit",
        os: "Debian",
        disk_gb: 5,
    },
];

/// CPU types: id, name, description, core counts.
const CPU_TYPES: &[(&str, &str, &str, &[u32])] = &[
    (
        "A",
        "Type A - Availability",
        "Server CPUs are assigned to a non-dedicated physical CPU thread with no resources guaranteed.",
        &[1, 2, 4, 6, 8, 12, 16, 20, 24, 28, 32],
    ),
    (
        "B",
        "Type B - General Purpose",
        "Server CPUs are assigned to a dedicated physical CPU thread with reserved resources guaranteed.",
        &[1, 2, 4, 6, 8, 12, 16, 20, 24, 28, 32, 36, 40, 48, 56, 64, 72],
    ),
    (
        "T",
        "Type T - Burstable",
        "Server CPUs are assigned to a dedicated physical CPU thread with reserved resources guaranteed.",
        &[1, 2, 4, 6, 8, 12, 16, 20, 24, 28, 32, 36, 40, 48, 56, 64, 72],
    ),
    (
        "D",
        "Type D - Dedicated",
        "Server CPUs are assigned to a dedicated physical CPU core (2 threads) with reserved resources guaranteed.",
        &[1, 2, 4, 6, 8, 12, 16, 20],
    ),
];

const RAM_MB: &[u64] = &[
    256, 512, 1024, 2048, 3072, 4096, 6144, 8192, 10240, 12288, 16384, 24576, 32768, 49152, 65536,
    98304, 131072,
];

const DISK_GB: &[u32] = &[
    5, 10, 15, 20, 30, 40, 50, 60, 80, 100, 150, 200, 250, 300, 350, 400, 450, 500, 600, 700, 800,
    900, 1000,
];

/// Country, region and city of the datacenter ids the simulator knows by name.
fn place(dc: &str) -> (&'static str, &'static str, &'static str) {
    match dc {
        "EU" => ("The Netherlands", "Europe", "Amsterdam"),
        "EU-FR" => ("Germany", "Europe", "Frankfurt"),
        "EU-LO" => ("United Kingdom", "Europe", "London"),
        "US-NY2" => ("United States", "North America", "New York"),
        "US-TX" => ("United States", "North America", "Texas"),
        "IL" => ("Israel", "Middle East", "Rosh Haayin"),
        "AS" => ("China", "Asia", "Hong Kong"),
        _ => ("Simulated", "Simulated", "Simulated"),
    }
}

/// The image a create names, by cloudcli name (`description`) or `DC:...` id, in `dc`.
pub fn find_image(dc: &str, image: &str) -> Result<&'static Image, String> {
    if let Some((image_dc, suffix)) = image.split_once(':') {
        if image_dc != dc {
            return Err(format!(
                "disk image ID must match the selected datacenter ({dc})"
            ));
        }
        return IMAGES
            .iter()
            .find(|i| i.id_suffix == suffix)
            .ok_or_else(|| format!("Invalid disk image id ({image})"));
    }
    IMAGES
        .iter()
        .find(|i| i.description == image.trim())
        .ok_or_else(|| {
            let names: Vec<&str> = IMAGES.iter().map(|i| i.description).collect();
            format!(
                "failed to find disk image ID from name '{image}', available names for datacenter {dc}: {}",
                names.join(", ")
            )
        })
}

/// Why `cpu` (`<cores><type>`) and `ram_mb` are not a size this account can create.
pub fn check_size(cpu: &str, ram_mb: u64) -> Result<(), String> {
    let kind = cpu.chars().last().unwrap_or(' ').to_string();
    let cores: Option<u32> = cpu
        .get(..cpu.len().saturating_sub(1))
        .and_then(|c| c.parse().ok());
    let Some((_, _, _, counts)) = CPU_TYPES.iter().find(|t| t.0 == kind) else {
        return Err(format!("invalid flag value (cpu={cpu})"));
    };
    if !cores.is_some_and(|c| counts.contains(&c)) {
        return Err(format!("invalid flag value (cpu={cpu})"));
    }
    if !RAM_MB.contains(&ram_mb) {
        return Err(format!("invalid flag value (ram={ram_mb})"));
    }
    Ok(())
}

fn datacenters(shared: &Shared) -> Value {
    Value::Array(
        shared
            .opts
            .datacenters
            .iter()
            .map(|dc| {
                let (country, region, city) = place(dc);
                json!({ "id": dc, "name": country, "category": region, "subCategory": city })
            })
            .collect(),
    )
}

fn images(dc: &str) -> Value {
    Value::Array(
        IMAGES
            .iter()
            .map(|i| {
                json!({
                    "datacenter": dc, "os": i.os, "id": format!("{dc}:{}", i.id_suffix),
                    "name": i.name, "code": i.code, "osDiskSizeGB": i.disk_gb,
                    "ramMBMin": { "A": 512, "B": 512, "T": 512, "D": 512 },
                })
            })
            .collect(),
    )
}

fn capabilities() -> Value {
    let types: Vec<Value> = CPU_TYPES
        .iter()
        .map(|(id, name, description, cores)| {
            json!({ "id": id, "name": name, "description": description, "cpuCores": cores, "ramMB": RAM_MB })
        })
        .collect();
    json!({
        "cpuTypes": types,
        "diskSizeGB": DISK_GB,
        "monthlyTrafficPackage": {
            "b20": "20Mbit/sec unmetered on 10Gbit/sec port",
            "t5000": "5000GB/month on 10Gbit/sec port",
        },
        "defaultMonthlyTrafficPackage": "t5000",
    })
}

fn sizes() -> Value {
    let size = |id: &str, cores: u32, ram: u64, disk: u32| json!({ "id": id, "ramMB": ram, "cpuCores": cores, "cpuType": "B", "diskSizeGB": disk, "monthlyTrafficPackage": "t5000" });
    json!([
        size("small", 2, 4096, 30),
        size("medium", 4, 8192, 60),
        size("large", 8, 16384, 100)
    ])
}

/// The options object of `GET /service/server` with no list flag.
fn options(shared: &Shared) -> Value {
    let dcs = &shared.opts.datacenters;
    let mut named = Map::new();
    let mut disk_images = Map::new();
    let mut traffic = Map::new();
    let mut networks = Map::new();
    for dc in dcs {
        named.insert(dc.clone(), json!(format!("{dc}: {}", place(dc).0)));
        let list: Vec<Value> = IMAGES
            .iter()
            .map(|i| {
                json!({
                    "description": i.description, "id": format!("{dc}:{}", i.id_suffix),
                    "sizeGB": i.disk_gb, "usageInfo": "", "guestDescription": "",
                    "freeTextOne": "", "freeTextTwo": "",
                })
            })
            .collect();
        disk_images.insert(dc.clone(), Value::Array(list));
        traffic.insert(
            dc.clone(),
            json!([{ "id": "t5000", "info": "5000GB/month on 10Gbit/sec port" }]),
        );
        networks.insert(
            dc.clone(),
            json!([{ "name": format!("wan-{}", dc.to_ascii_lowercase()), "ips": [] }]),
        );
    }
    let cpu: Vec<String> = CPU_TYPES
        .iter()
        .flat_map(|(id, _, _, cores)| cores.iter().map(move |c| format!("{c}{id}")))
        .collect();
    json!({
        "datacenters": named, "cpu": cpu, "ram": RAM_MB, "disk": DISK_GB,
        "diskImages": disk_images, "traffic": traffic, "networks": networks,
        "billing": ["hourly", "monthly"],
    })
}

/// `GET /service/server`, with or without one of the list flags.
pub(super) async fn server_options(
    State(shared): State<Arc<Shared>>,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    let flag = |k: &str| q.get(k).is_some_and(|v| !v.is_empty() && v != "0");
    let lists = flag("images") || flag("capabilities") || flag("sizes");
    if !lists {
        if flag("datacenter") {
            return Json(datacenters(&shared)).into_response();
        }
        return Json(options(&shared)).into_response();
    }
    let dc = q.get("datacenter").cloned().unwrap_or_default();
    if !shared.opts.datacenters.contains(&dc) {
        return error(
            StatusCode::INTERNAL_SERVER_ERROR,
            &format!("Invalid datacenter ({dc})"),
        );
    }
    let answer = if flag("images") {
        images(&dc)
    } else if flag("capabilities") {
        capabilities()
    } else {
        sizes()
    };
    Json(answer).into_response()
}
