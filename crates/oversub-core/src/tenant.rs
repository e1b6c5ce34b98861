//! Several tenants in one pool: the contention-aware plan of `oversub-tenants` applied to address spaces.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};

use oversub_tenants::priority;
use oversub_tenants::swap::{self, AlphaRule};
use oversub_tenants::TenantError;

use crate::space::{AddressSpace, SpaceShared, SpaceUsage};
use crate::PagerError;

/// What a tenant declares when it joins a pool.
#[derive(Debug, Clone, PartialEq)]
pub struct TenantConfig {
    /// A name for logs and reports.
    pub name: String,
    /// The memory it needs, MEM(i), in bytes.
    pub demand_bytes: u64,
    /// Its priority: larger is more important. Use the contention degree W_i measured by running the tenants
    /// alone and together (`oversub_tenants::priority`), or any ranking of your own. Equal priorities rank in
    /// order of arrival.
    pub priority: f64,
}

impl TenantConfig {
    /// A tenant named `name` needing `demand_bytes`, with `priority`.
    pub fn new(name: impl Into<String>, demand_bytes: u64, priority: f64) -> Self {
        TenantConfig {
            name: name.into(),
            demand_bytes,
            priority,
        }
    }

    pub(crate) fn validate(&self, store_bytes: u64) -> Result<(), PagerError> {
        if self.demand_bytes == 0 {
            return Err(PagerError::InvalidSize(format!(
                "tenant {:?} declares no memory; a tenant needs at least one byte",
                self.name
            )));
        }
        if !self.priority.is_finite() {
            return Err(TenantError::InvalidInput(format!(
                "tenant {:?}: a priority must be a finite number, not {}",
                self.name, self.priority
            ))
            .into());
        }
        // Any of a tenant's buffers may have to live on the store, so all of them must fit there.
        if self.demand_bytes > store_bytes {
            return Err(TenantError::TooLarge {
                tenant: self.name.clone(),
                demand_bytes: self.demand_bytes,
                limit_bytes: store_bytes,
                what: "the swap store",
            }
            .into());
        }
        Ok(())
    }
}

/// One tenant's place in the pool's plan.
#[derive(Debug, Clone, PartialEq)]
pub struct TenantQuota {
    /// The tenant's address space id.
    pub space_id: u32,
    /// Its name.
    pub name: String,
    /// Its declared priority.
    pub priority: f64,
    /// Its rank: 0 is the highest priority.
    pub rank: usize,
    /// Its declared demand.
    pub demand_bytes: u64,
    /// Its swap ratio α: the share of its demand kept on the store.
    pub alpha: f64,
    /// The most device memory it may hold.
    pub resident_limit_bytes: u64,
    /// Whether the plan made it a victim.
    pub victim: bool,
    /// Device memory it holds now.
    pub charged_bytes: u64,
}

#[derive(Debug)]
struct Registered {
    id: u32,
    config: TenantConfig,
    usage: Arc<SpaceUsage>,
    space: Weak<SpaceShared>,
    quota: Option<swap::Quota>,
    rank: usize,
}

/// The pool's tenants, in order of arrival, with the last plan.
#[derive(Debug)]
pub(crate) struct Tenants {
    rule: AlphaRule,
    list: Vec<Registered>,
}

/// Spaces holding more than their new limit, with that limit.
pub(crate) type OverQuota = Vec<(Arc<SpaceShared>, u64)>;

impl Tenants {
    pub(crate) fn new(rule: AlphaRule) -> Self {
        Tenants {
            rule,
            list: Vec::new(),
        }
    }

    pub(crate) fn add(&mut self, config: TenantConfig, space: &Arc<SpaceShared>) {
        self.list.push(Registered {
            id: space.id(),
            config,
            usage: Arc::clone(&space.usage),
            space: Arc::downgrade(space),
            quota: None,
            rank: 0,
        });
    }

    pub(crate) fn remove(&mut self, id: u32) {
        self.list.retain(|t| t.id != id);
    }

    /// Ranks the tenants, runs Alg. 2 over them and sets every tenant's limit. Returns the spaces now over it.
    pub(crate) fn replan(
        &mut self,
        capacity_bytes: u64,
        page_bytes: u64,
    ) -> Result<OverQuota, PagerError> {
        let weights: Vec<f64> = self.list.iter().map(|t| t.config.priority).collect();
        let ranking = priority::from_weights(&weights)?;
        let demands: Vec<u64> = ranking
            .order
            .iter()
            .map(|&i| self.list[i].config.demand_bytes)
            .collect();
        let options = swap::Options {
            rule: self.rule,
            page_bytes: page_bytes.max(1),
        };
        let plan = swap::plan(&demands, capacity_bytes, &options)?;
        let mut over = Vec::new();
        for (rank, (&i, quota)) in ranking.order.iter().zip(plan.tenants).enumerate() {
            let t = &mut self.list[i];
            t.usage
                .limit_bytes
                .store(quota.resident_limit_bytes, Ordering::Release);
            // Alg. 1 line 4: the store serves the higher-ranked tenants' transfers first.
            t.usage
                .io_priority
                .store(-i64::try_from(rank).unwrap_or(i64::MAX), Ordering::Relaxed);
            if t.usage.charged_bytes.load(Ordering::Acquire) > quota.resident_limit_bytes {
                if let Some(space) = t.space.upgrade() {
                    over.push((space, quota.resident_limit_bytes));
                }
            }
            tracing::debug!(
                tenant = %t.config.name,
                rank,
                alpha = quota.alpha,
                resident_limit_bytes = quota.resident_limit_bytes,
                "tenant plan"
            );
            t.quota = Some(quota);
            t.rank = rank;
        }
        Ok(over)
    }

    pub(crate) fn quotas(&self) -> Vec<TenantQuota> {
        let mut out: Vec<TenantQuota> = self
            .list
            .iter()
            .map(|t| {
                let q = t.quota.unwrap_or(swap::Quota {
                    demand_bytes: t.config.demand_bytes,
                    alpha: 0.0,
                    swapped_bytes: 0,
                    resident_limit_bytes: t.config.demand_bytes,
                    victim: false,
                });
                TenantQuota {
                    space_id: t.id,
                    name: t.config.name.clone(),
                    priority: t.config.priority,
                    rank: t.rank,
                    demand_bytes: t.config.demand_bytes,
                    alpha: q.alpha,
                    resident_limit_bytes: q.resident_limit_bytes,
                    victim: q.victim,
                    charged_bytes: t.usage.charged_bytes.load(Ordering::Acquire),
                }
            })
            .collect();
        out.sort_by_key(|q| q.rank);
        out
    }
}

/// Pages out the least recently used resident buffers of each space until it is within its limit. Buffers with
/// an operation in flight are skipped (their space stays over until they finish, and cannot grow meanwhile).
pub(crate) fn shrink_to_quota(over: OverQuota) -> Result<(), PagerError> {
    for (shared, limit) in over {
        let space = AddressSpace::from_shared(shared);
        for (buffer, _) in space.shared().eviction_candidates() {
            if space.charged_bytes() <= limit {
                break;
            }
            match space.page_out(buffer) {
                // Freed or paged by its owner meanwhile: nothing to do.
                Ok(())
                | Err(
                    PagerError::UnknownBuffer(_)
                    | PagerError::AlreadyPagedOut(_)
                    | PagerError::OperationInFlight { .. },
                ) => {}
                Err(e) => return Err(e),
            }
        }
        if space.charged_bytes() > limit {
            tracing::warn!(
                space = space.id(),
                charged_bytes = space.charged_bytes(),
                limit,
                "tenant stays over its new quota until its operations in flight finish"
            );
        }
    }
    Ok(())
}
