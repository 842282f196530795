//! A pod's affinity and spread rules, resolved once per pod to count indexes, and the
//! check of one slot against them.

use super::*;

impl<'a> Index<'a> {
    fn rules(
        &mut self,
        pod: &'a PodInfo,
        slots: &[Slot<'_>],
        pods_on: &[Vec<&'a PodInfo>],
    ) -> usize {
        let addr = pod as *const PodInfo as usize;
        let known = match self.last_rules {
            Some((a, r)) if a == addr => Some(r),
            _ => self.rule_ids.get(&addr).copied().or_else(|| {
                let r = self.rule_sigs.get(&RuleSig::of(pod)).copied()?;
                self.rule_ids.insert(addr, r);
                Some(r)
            }),
        };
        let r = match known {
            Some(r) => r as usize,
            None => {
                let anti = pod
                    .pod_anti_affinity
                    .iter()
                    .map(|t| self.count(CountKey::for_term(t), slots, pods_on))
                    .collect();
                let affinity = pod
                    .pod_affinity
                    .iter()
                    .map(|t| self.count(CountKey::for_term(t), slots, pods_on))
                    .collect();
                let spread = pod
                    .spread
                    .iter()
                    .map(|c| {
                        let key = CountKey {
                            namespaces: Namespaces::Listed(vec![pod.namespace.clone()]),
                            selector: c.selector.clone(),
                            topology_key: c.topology_key.clone(),
                            spread: Some(Eligibility {
                                node_selector: if c.honor_node_affinity {
                                    pod.node_selector.clone()
                                } else {
                                    BTreeMap::new()
                                },
                                node_affinity: if c.honor_node_affinity {
                                    pod.node_affinity.clone()
                                } else {
                                    None
                                },
                                tolerations: c.honor_taints.then(|| pod.tolerations.clone()),
                            }),
                        };
                        self.count(key, slots, pods_on)
                    })
                    .collect();
                let r = self.rules.len();
                self.rules.push(PodRules {
                    anti,
                    affinity,
                    self_affine: pod
                        .pod_affinity
                        .iter()
                        .all(|t| t.selects(&pod.namespace, &pod.labels)),
                    spread,
                    spread_own: pod
                        .spread
                        .iter()
                        .map(|c| u32::from(c.selector.matches(&pod.labels)))
                        .collect(),
                    groups: Vec::new(),
                    groups_seen: 0,
                });
                self.rule_ids.insert(addr, r as u32);
                self.rule_sigs.insert(RuleSig::of(pod), r as u32);
                r
            }
        };
        self.last_rules = Some((addr, r as u32));
        let rules = &mut self.rules[r];
        if rules.groups_seen == 0 && !pod.deleting {
            let filed = self.group_index.iter().filter_map(|(k, by_value)| {
                pod.labels.get(k).and_then(|v| by_value.get(v.as_str()))
            });
            for &g in filed.flatten().chain(&self.unindexed_groups) {
                if self.groups[g as usize]
                    .term
                    .selects(&pod.namespace, &pod.labels)
                {
                    rules.groups.push(g);
                }
            }
            rules.groups_seen = self.groups.len();
        }
        while rules.groups_seen < self.groups.len() {
            let g = rules.groups_seen;
            if !pod.deleting && self.groups[g].term.selects(&pod.namespace, &pod.labels) {
                rules.groups.push(g as u32);
            }
            rules.groups_seen += 1;
        }
        r
    }

    /// Resolves `pod`'s rules now (see [`super::Model::prepare`]).
    pub fn prepare(&mut self, slots: &[Slot<'_>], pods_on: &[Vec<&'a PodInfo>], pod: &'a PodInfo) {
        if !self.groups.is_empty()
            || !pod.pod_anti_affinity.is_empty()
            || !pod.pod_affinity.is_empty()
            || !pod.spread.is_empty()
        {
            self.rules(pod, slots, pods_on);
        }
    }

    /// The inter-pod and spread filters for `pod` on slot `i`.
    pub fn check(
        &mut self,
        slots: &[Slot<'_>],
        pods_on: &[Vec<&'a PodInfo>],
        pod: &'a PodInfo,
        i: usize,
    ) -> Result<(), Unfit> {
        if self.groups.is_empty()
            && pod.pod_anti_affinity.is_empty()
            && pod.pod_affinity.is_empty()
            && pod.spread.is_empty()
        {
            return Ok(());
        }
        let r = self.rules(pod, slots, pods_on);
        let rules = &self.rules[r];
        let domain = |topo: usize| self.topos[topo].slot_domain.get(i).copied().flatten();
        // Pods already there whose anti-affinity rejects this one.
        for &g in &rules.groups {
            let g = &self.groups[g as usize];
            if let Some(d) = domain(g.topo) {
                if g.by_domain.get(d as usize).copied().unwrap_or(0) > 0 {
                    return Err(Unfit::ExistingAntiAffinity);
                }
            }
        }
        for &k in &rules.anti {
            let c = &self.counts[k as usize];
            let Some(d) = domain(c.topo) else {
                continue;
            };
            if c.get(d) > 0 {
                return Err(Unfit::PodAntiAffinity);
            }
        }
        if !rules.affinity.is_empty() {
            let mut all_present = true;
            let mut any_anywhere = false;
            for (term, &k) in pod.pod_affinity.iter().zip(&rules.affinity) {
                let c = &self.counts[k as usize];
                let Some(d) = domain(c.topo) else {
                    return Err(Unfit::MissingTopologyLabel(term.topology_key.clone()));
                };
                any_anywhere |= c.total > 0;
                if c.get(d) == 0 {
                    all_present = false;
                }
            }
            // The first pod of a group with affinity to itself may go anywhere, or it
            // would wait forever (the scheduler's own exception).
            let first_of_its_kind = !any_anywhere && rules.self_affine;
            if !all_present && !first_of_its_kind {
                return Err(Unfit::PodAffinity);
            }
        }
        for ((spec, &k), &own) in pod.spread.iter().zip(&rules.spread).zip(&rules.spread_own) {
            let c = &self.counts[k as usize];
            let Some(d) = domain(c.topo) else {
                return Err(Unfit::MissingTopologyLabel(spec.topology_key.clone()));
            };
            let (domains, lowest) = c
                .spread
                .as_ref()
                .map_or((0, 0), |s| (self.domains[s.domains].present, s.min()));
            let min = if spec.min_domains.is_some_and(|n| domains < n) {
                0
            } else {
                lowest
            };
            if (c.get(d) + own).saturating_sub(min) > spec.max_skew {
                return Err(Unfit::TopologySpread);
            }
        }
        Ok(())
    }
}
