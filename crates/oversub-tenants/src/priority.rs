//! Alg. 1: memory contention-aware priority assignment.
//!
//! Each application is run alone (response time C_i(1)) and together with all the others (C_i(N)). Its contention
//! degree is W_i = (C_i(N) − C_i(1)) / C_i(1) × 1/n_i, where n_i is its number of subtasks: the relative slowdown,
//! discounted because more subtasks can overlap more of it by running in parallel. The larger W_i, the higher the
//! priority, since that application loses most when it has to wait.

use serde::{Deserialize, Serialize};

use crate::TenantError;

/// One application's measurements, the input of Alg. 1.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Contention {
    /// A name for messages and reports.
    pub name: String,
    /// Response time alone, C_i(1), in seconds.
    pub alone_s: f64,
    /// Response time among all the others, C_i(N), in seconds.
    pub together_s: f64,
    /// Number of subtasks, n_i.
    pub subtasks: u32,
}

impl Contention {
    /// Checked measurements: times finite, `alone_s` positive, `together_s` not negative, at least one subtask.
    pub fn new(
        name: impl Into<String>,
        alone_s: f64,
        together_s: f64,
        subtasks: u32,
    ) -> Result<Self, TenantError> {
        let c = Contention {
            name: name.into(),
            alone_s,
            together_s,
            subtasks,
        };
        c.validate()?;
        Ok(c)
    }

    /// Refuses measurements the formula cannot use.
    pub fn validate(&self) -> Result<(), TenantError> {
        let bad = |what: String| Err(TenantError::InvalidInput(format!("{}: {what}", self.name)));
        if !self.alone_s.is_finite() || self.alone_s <= 0.0 {
            return bad(format!(
                "the response time alone must be a positive number of seconds, not {}",
                self.alone_s
            ));
        }
        if !self.together_s.is_finite() || self.together_s < 0.0 {
            return bad(format!(
                "the response time together must be a non-negative number of seconds, not {}",
                self.together_s
            ));
        }
        if self.subtasks == 0 {
            return bad("an application needs at least one subtask".into());
        }
        Ok(())
    }

    /// W_i = (C_i(N) − C_i(1)) / C_i(1) / n_i. Negative when the application ran faster among the others (noise);
    /// it then simply ranks last.
    pub fn degree(&self) -> f64 {
        (self.together_s - self.alone_s) / self.alone_s / f64::from(self.subtasks)
    }
}

/// The outcome of Alg. 1.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Ranking {
    /// W_i of each input, in input order.
    pub degrees: Vec<f64>,
    /// Input indices from the highest priority to the lowest.
    pub order: Vec<usize>,
    /// Rank of each input, in input order: 0 is the highest priority.
    pub rank: Vec<usize>,
}

/// Alg. 1: contention degrees and the priority order (largest W_i first; equal degrees keep their input order).
pub fn assign(apps: &[Contention]) -> Result<Ranking, TenantError> {
    for a in apps {
        a.validate()?;
    }
    from_weights(&apps.iter().map(Contention::degree).collect::<Vec<_>>())
}

/// The priority order for weights given directly (a larger weight is a higher priority; ties keep input order),
/// for tenants whose priority is set by hand rather than measured.
pub fn from_weights(weights: &[f64]) -> Result<Ranking, TenantError> {
    if let Some(w) = weights.iter().find(|w| !w.is_finite()) {
        return Err(TenantError::InvalidInput(format!(
            "a priority must be a finite number, not {w}"
        )));
    }
    let mut order: Vec<usize> = (0..weights.len()).collect();
    // Stable sort, descending; total_cmp is a total order on the finite values checked above.
    order.sort_by(|&a, &b| weights[b].total_cmp(&weights[a]));
    let mut rank = vec![0; weights.len()];
    for (r, &i) in order.iter().enumerate() {
        rank[i] = r;
    }
    Ok(Ranking {
        degrees: weights.to_vec(),
        order,
        rank,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn degrees_by_hand() {
        // (30 − 20) / 20 / 5 = 0.1; (24 − 12) / 12 / 2 = 0.5; (9 − 9) / 9 / 1 = 0.
        let apps = [
            Contention::new("a", 20.0, 30.0, 5).unwrap(),
            Contention::new("b", 12.0, 24.0, 2).unwrap(),
            Contention::new("c", 9.0, 9.0, 1).unwrap(),
        ];
        let r = assign(&apps).unwrap();
        assert!((r.degrees[0] - 0.1).abs() < 1e-12);
        assert!((r.degrees[1] - 0.5).abs() < 1e-12);
        assert_eq!(r.degrees[2], 0.0);
        assert_eq!(r.order, vec![1, 0, 2]);
        assert_eq!(r.rank, vec![1, 0, 2]);
    }

    #[test]
    fn more_subtasks_lower_the_degree() {
        // Same slowdown (100%), 5 against 11 subtasks: the task with fewer subtasks is hurt more.
        let r = assign(&[
            Contention::new("t11", 10.0, 20.0, 11).unwrap(),
            Contention::new("t5", 10.0, 20.0, 5).unwrap(),
        ])
        .unwrap();
        assert_eq!(r.order, vec![1, 0]);
    }

    #[test]
    fn ties_keep_input_order() {
        let r = from_weights(&[1.0, 2.0, 1.0, 2.0]).unwrap();
        assert_eq!(r.order, vec![1, 3, 0, 2]);
    }

    #[test]
    fn bad_measurements_are_refused() {
        assert!(Contention::new("x", 0.0, 1.0, 1).is_err());
        assert!(Contention::new("x", -1.0, 1.0, 1).is_err());
        assert!(Contention::new("x", 1.0, f64::NAN, 1).is_err());
        assert!(Contention::new("x", 1.0, -2.0, 1).is_err());
        let e = Contention::new("x", 1.0, 2.0, 0).unwrap_err();
        assert!(e.to_string().contains("at least one subtask"), "{e}");
        assert!(from_weights(&[1.0, f64::INFINITY]).is_err());
    }
}
