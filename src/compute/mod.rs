//! The emulated accelerator: time distributions in DLIO's syntax and a sleep that ends on time.
//!
//! DLIO draws `computation_time` (and `eval_time`, `preprocess_time`) from a distribution, takes
//! `abs()` of the draw and sleeps that long. A plain `thread::sleep` overshoots by the kernel's timer
//! slack (50 µs by default) plus wake-up latency, which at dlrm's 0.375 ms steps would be a 15%
//! error; [`Sleeper`] learns that lateness and wakes early by as much.

use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, Exp, Gamma, Normal, Poisson};

/// The longest time a [`TimeSpec`] may ask for, on average and per draw: 10^6 s (11.6 days). A
/// step or a pause longer than that is a typo, not a workload.
pub const MAX_SECONDS: f64 = 1e6;

/// A duration in seconds, fixed or drawn from a distribution.
#[derive(Debug, Clone, PartialEq)]
pub enum TimeSpec {
    Fixed(f64),
    Normal { mean: f64, stdev: f64 },
    Uniform { min: f64, max: f64 },
    Gamma { shape: f64, scale: f64 },
    Exponential { scale: f64 },
    Poisson { lam: f64 },
}

impl TimeSpec {
    pub const ZERO: TimeSpec = TimeSpec::Fixed(0.0);

    /// A normal distribution, or the fixed time when it has no spread.
    pub fn normal(mean: f64, stdev: f64) -> TimeSpec {
        if stdev == 0.0 {
            TimeSpec::Fixed(mean)
        } else {
            TimeSpec::Normal { mean, stdev }
        }
    }

    /// Refuses parameters the distribution cannot take, and times beyond [`MAX_SECONDS`]: a draw
    /// that cannot be made must not become 0 s of compute, and a 10^30 s step is a typo.
    pub fn validate(&self) -> Result<(), String> {
        let ok = match *self {
            TimeSpec::Fixed(_) => true,
            TimeSpec::Normal { stdev, .. } => (0.0..=MAX_SECONDS).contains(&stdev),
            TimeSpec::Uniform { min, max } => min <= max && min.abs().max(max.abs()) <= MAX_SECONDS,
            TimeSpec::Gamma { shape, scale } => shape > 0.0 && scale > 0.0,
            TimeSpec::Exponential { scale } => scale > 0.0,
            TimeSpec::Poisson { lam } => lam > 0.0,
        };
        if !ok {
            return Err(format!(
                "invalid distribution parameters {self:?} (stdev ≥ 0, min ≤ max, shape, scale, lam > 0)"
            ));
        }
        // NaN parameters give a NaN mean, refused as well.
        if self.mean().is_nan() || self.mean() > MAX_SECONDS {
            return Err(format!(
                "{} s on average is beyond the longest time dlio-rs sleeps, {MAX_SECONDS:e} s (11.6 \
                 days); valid times are 0 to {MAX_SECONDS:e} s",
                self.mean()
            ));
        }
        Ok(())
    }

    /// The expected value of the (absolute) draw, for reporting the ideal rate.
    pub fn mean(&self) -> f64 {
        match *self {
            TimeSpec::Fixed(v) => v.abs(),
            TimeSpec::Normal { mean, .. } => mean.abs(),
            TimeSpec::Uniform { min, max } => ((min + max) / 2.0).abs(),
            TimeSpec::Gamma { shape, scale } => shape * scale,
            TimeSpec::Exponential { scale } => scale,
            TimeSpec::Poisson { lam } => lam,
        }
    }

    pub fn is_zero(&self) -> bool {
        matches!(self, TimeSpec::Fixed(v) if *v == 0.0)
    }

    /// One draw, after abs() as DLIO applies it.
    pub fn draw(&self, rng: &mut SmallRng) -> Duration {
        let seconds: f64 = match *self {
            TimeSpec::Fixed(v) => v,
            TimeSpec::Normal { mean, stdev } => {
                Normal::new(mean, stdev).map_or(mean, |d| d.sample(rng))
            }
            TimeSpec::Uniform { min, max } => {
                if min == max {
                    min
                } else {
                    rng.random_range(min..max)
                }
            }
            // Parameters were checked ([`TimeSpec::validate`]); the mean is what a distribution
            // that still refused would average.
            TimeSpec::Gamma { shape, scale } => {
                Gamma::new(shape, scale).map_or(shape * scale, |d| d.sample(rng))
            }
            TimeSpec::Exponential { scale } => {
                Exp::new(1.0 / scale).map_or(scale, |d| d.sample(rng))
            }
            TimeSpec::Poisson { lam } => Poisson::new(lam).map_or(lam, |d| d.sample(rng)),
        };
        Duration::from_secs_f64(seconds.abs().min(MAX_SECONDS))
    }
}

/// A generator for draws, seeded per rank so runs repeat.
pub fn time_rng(seed: u64, rank: usize, stream: u64) -> SmallRng {
    SmallRng::seed_from_u64(
        seed ^ (rank as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ stream.rotate_left(32),
    )
}

/// Asks the kernel to wake this thread on time (timer slack 1 ns instead of 50 µs). Per thread.
pub fn tighten_timer_slack() {
    // SAFETY: PR_SET_TIMERSLACK takes an integer argument and changes only this thread's slack.
    unsafe {
        libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong);
    }
}

/// Spins until `done()` for at most `limit`, yielding the core to any runnable thread at each
/// turn; returns `done()`. For waits that usually end within microseconds: waking a sleeping
/// thread costs tens of µs on small VMs. Yielding, not spinning in place, because a spinner must
/// not hold a core that the thread it waits for needs (ranks and readers outnumber cores).
/// Measured on 2 cores: letting only as many threads spin as there are cores, and the others
/// sleep, lowered AU at 375 µs steps (4 ranks 96 → 92 %, 8 ranks 93 → 84 %): the sleepers'
/// wake-ups cost more than the spinners' turns.
pub fn spin_until(limit: Duration, done: impl Fn() -> bool) -> bool {
    let until = Instant::now() + limit;
    loop {
        if done() {
            return true;
        }
        if Instant::now() >= until {
            return false;
        }
        std::thread::yield_now();
    }
}

/// The longest early wake-up the sleeper will learn: beyond this the machine is overloaded and
/// spinning would only take the core from someone else.
const MAX_LEAD: Duration = Duration::from_micros(200);

/// A sleep that ends on time without burning a core. The kernel wakes a sleeping thread late by
/// a fairly steady amount (about 40 µs on small VMs, even with 1 ns timer slack); the sleeper
/// learns that lateness per thread, asks to be woken that much early, and spins only for what
/// is left, usually a few µs. Spinning the whole lateness instead would, with more ranks than
/// cores, get spinners preempted for entire scheduler slices (milliseconds).
#[derive(Debug, Clone, Default)]
pub struct Sleeper {
    /// Moving average of how late the kernel wakes this thread, in seconds.
    lateness: f64,
}

impl Sleeper {
    /// Sleeps for `duration`, or less when a signal asks the process to stop
    /// ([`crate::interrupt`]); returns the time actually slept.
    pub fn sleep(&mut self, duration: Duration) -> Duration {
        let start = Instant::now();
        if duration.is_zero() {
            return start.elapsed();
        }
        let deadline = start + duration;
        let lead = Duration::from_secs_f64(self.lateness).min(MAX_LEAD);
        if let Some(kernel_part) = duration.checked_sub(lead).filter(|d| !d.is_zero()) {
            crate::interrupt::sleep_until(start + kernel_part);
            if crate::interrupt::received().is_some() {
                return start.elapsed();
            }
            let late = start.elapsed().as_secs_f64() - kernel_part.as_secs_f64();
            self.lateness = 0.9 * self.lateness + 0.1 * late.clamp(0.0, MAX_LEAD.as_secs_f64());
        }
        while Instant::now() < deadline {
            std::hint::spin_loop();
        }
        start.elapsed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sleeper_never_wakes_early() {
        tighten_timer_slack();
        let mut sleeper = Sleeper::default();
        for micros in [0u64, 1, 50, 300, 1000, 2000].iter().cycle().take(60) {
            let asked = Duration::from_micros(*micros);
            let slept = sleeper.sleep(asked);
            assert!(slept >= asked, "asked {asked:?}, slept {slept:?}");
        }
        assert!(sleeper.lateness <= MAX_LEAD.as_secs_f64());
    }

    #[test]
    fn draws_are_absolute_and_follow_the_mean() {
        let mut rng = time_rng(1, 0, 0);
        let negative = TimeSpec::Fixed(-0.25);
        assert_eq!(negative.draw(&mut rng), Duration::from_millis(250));
        let normal = TimeSpec::Normal {
            mean: 0.0,
            stdev: 1.0,
        };
        let n = 20_000;
        let mean: f64 = (0..n)
            .map(|_| normal.draw(&mut rng).as_secs_f64())
            .sum::<f64>()
            / n as f64;
        // E|N(0,1)| = sqrt(2/pi) ≈ 0.798: abs() is applied to each draw.
        assert!((mean - 0.798).abs() < 0.02, "{mean}");
        let uniform = TimeSpec::Uniform { min: 1.0, max: 3.0 };
        let mean: f64 = (0..n)
            .map(|_| uniform.draw(&mut rng).as_secs_f64())
            .sum::<f64>()
            / n as f64;
        assert!((mean - 2.0).abs() < 0.03, "{mean}");
    }
}
