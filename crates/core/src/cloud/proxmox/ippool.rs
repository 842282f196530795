//! The static IPv4 pool. Nothing is stored: the addresses in use are read from the live
//! VMs' `ipconfig0` every time, so a restarted nodewright never hands one out twice.

use std::collections::BTreeSet;
use std::net::Ipv4Addr;

use serde::Deserialize;

/// `ipConfig: {static: {...}}` of a node group.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct StaticPool {
    /// The subnet, e.g. `192.168.10.0/24`; its prefix length goes into `ipconfig0`.
    pub cidr: String,
    /// First address handed out (default: the first host address of `cidr`).
    #[serde(default)]
    pub first: Option<Ipv4Addr>,
    /// Last address handed out (default: the last host address of `cidr`).
    #[serde(default)]
    pub last: Option<Ipv4Addr>,
    pub gateway: Ipv4Addr,
    /// DNS servers (`nameserver`).
    #[serde(default)]
    pub nameservers: Vec<Ipv4Addr>,
}

/// A validated pool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pool {
    pub prefix: u8,
    pub first: u32,
    pub last: u32,
    pub gateway: Ipv4Addr,
    pub nameservers: Vec<Ipv4Addr>,
}

impl StaticPool {
    pub fn validate(&self) -> Result<Pool, String> {
        let (addr, len) = self.cidr.split_once('/').ok_or_else(|| {
            format!(
                "ipConfig.static.cidr '{}' must look like 10.0.0.0/24",
                self.cidr
            )
        })?;
        let addr: Ipv4Addr = addr
            .parse()
            .map_err(|_| format!("ipConfig.static.cidr '{}': not an IPv4 address", self.cidr))?;
        let prefix: u8 = len
            .parse()
            .ok()
            .filter(|p| (8..=30).contains(p))
            .ok_or_else(|| {
                format!(
                    "ipConfig.static.cidr '{}': prefix length must be 8..30",
                    self.cidr
                )
            })?;
        let mask = u32::MAX << (32 - prefix);
        let net = u32::from(addr) & mask;
        let bcast = net | !mask;
        let first = self.first.map(u32::from).unwrap_or(net + 1);
        let last = self.last.map(u32::from).unwrap_or(bcast - 1);
        let inside = |a: u32| a > net && a < bcast;
        let hosts = format!(
            "{} holds host addresses {} to {}",
            self.cidr,
            Ipv4Addr::from(net + 1),
            Ipv4Addr::from(bcast - 1)
        );
        for (field, a) in [("first", first), ("last", last)] {
            if !inside(a) {
                return Err(format!(
                    "ipConfig.static.{field} {} lies outside the cidr: {hosts}; expected an address in that range",
                    Ipv4Addr::from(a)
                ));
            }
        }
        if first > last {
            return Err(format!(
                "ipConfig.static.first {} is after last {}; expected first <= last",
                Ipv4Addr::from(first),
                Ipv4Addr::from(last)
            ));
        }
        if !inside(u32::from(self.gateway)) {
            return Err(format!(
                "ipConfig.static.gateway {} lies outside the cidr: {hosts}; a VM could not reach it, expected the subnet's router",
                self.gateway
            ));
        }
        Ok(Pool {
            prefix,
            first,
            last,
            gateway: self.gateway,
            nameservers: self.nameservers.clone(),
        })
    }
}

/// The IPv4 address of an `ipconfig0` value (`ip=10.0.0.5/24,gw=10.0.0.1`).
pub fn address_of(ipconfig: &str) -> Option<Ipv4Addr> {
    ipconfig.split(',').find_map(|part| {
        let v = part.trim().strip_prefix("ip=")?;
        v.split('/').next()?.parse().ok()
    })
}

impl Pool {
    /// How many addresses the pool hands out: `first..=last` without the gateway.
    pub fn capacity(&self) -> u64 {
        let span = u64::from(self.last - self.first) + 1;
        let gw = u32::from(self.gateway);
        span - u64::from((self.first..=self.last).contains(&gw))
    }

    /// The lowest free address, skipping the gateway and everything in `used`.
    pub fn allocate(&self, used: &BTreeSet<Ipv4Addr>) -> Option<Ipv4Addr> {
        (self.first..=self.last)
            .map(Ipv4Addr::from)
            .find(|a| *a != self.gateway && !used.contains(a))
    }

    /// The `ipconfig0` value for `addr`.
    pub fn ipconfig(&self, addr: Ipv4Addr) -> String {
        format!("ip={addr}/{},gw={}", self.prefix, self.gateway)
    }

    /// The `nameserver` value, if any.
    pub fn nameserver(&self) -> Option<String> {
        if self.nameservers.is_empty() {
            None
        } else {
            Some(
                self.nameservers
                    .iter()
                    .map(|n| n.to_string())
                    .collect::<Vec<_>>()
                    .join(" "),
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allocates_lowest_free() {
        let p = StaticPool {
            cidr: "10.0.0.0/29".into(),
            first: None,
            last: None,
            gateway: Ipv4Addr::new(10, 0, 0, 1),
            nameservers: vec![],
        }
        .validate()
        .expect("valid");
        let mut used = BTreeSet::new();
        let a = p.allocate(&used).expect("free");
        assert_eq!(a, Ipv4Addr::new(10, 0, 0, 2));
        assert_eq!(p.ipconfig(a), "ip=10.0.0.2/29,gw=10.0.0.1");
        assert_eq!(address_of(&p.ipconfig(a)), Some(a));
        for i in 2..=6 {
            used.insert(Ipv4Addr::new(10, 0, 0, i));
        }
        assert_eq!(p.allocate(&used), None);
    }
}
