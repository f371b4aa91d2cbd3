//! Student's t, for the noise bound of `dlio-rs compare`: two runs of a few epochs each have
//! means whose difference is judged against Welch's t bound, `t(0.975, ν) · √(s²_A/n_A +
//! s²_B/n_B)` with the Welch–Satterthwaite degrees of freedom ν. With 2 or 3 epochs a run, ν is
//! small and the t quantile is far above the normal's 1.96 (12.7 at ν = 1, 4.30 at ν = 2): a
//! bound of twice the standard error would call noise a difference about one time in four.
//!
//! The quantile is found by bisection on the t distribution's CDF, itself the regularized
//! incomplete beta function (a continued fraction, as in Numerical Recipes' `betacf`); ν need
//! not be a whole number. Accurate to about 1e-9 relative, far beyond what a noise bound needs.

/// The two-sided difference of two runs' means, judged at 95 %.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WelchBound {
    /// √(s²_A/n_A + s²_B/n_B), with each run's sample variance (divided by n − 1).
    pub standard_error: f64,
    /// Welch–Satterthwaite: (v_A + v_B)² / (v_A²/(n_A − 1) + v_B²/(n_B − 1)), v = s²/n.
    pub degrees_of_freedom: f64,
    /// The t distribution's 0.975 quantile for those degrees of freedom.
    pub t_quantile: f64,
    /// `t_quantile · standard_error`: a difference of means beyond it is not noise, at 95 %.
    pub bound: f64,
}

/// The confidence of [`welch`]'s bound: two-sided 95 %.
pub const CONFIDENCE: f64 = 0.95;

/// Welch's bound for the means of `a` and `b`; `None` when a run has fewer than two values (its
/// variance, so its noise, is unknown).
pub fn welch(a: &[f64], b: &[f64]) -> Option<WelchBound> {
    if a.len() < 2 || b.len() < 2 {
        return None;
    }
    let part = |values: &[f64]| {
        let n = values.len() as f64;
        let mean = values.iter().sum::<f64>() / n;
        let variance = values.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0);
        (variance / n, n)
    };
    let ((va, na), (vb, nb)) = (part(a), part(b));
    let se2 = va + vb;
    // Both runs without spread: the formula is 0/0; any ν gives a bound of 0, so take the
    // pooled one.
    let degrees_of_freedom = if se2 > 0.0 {
        se2 * se2 / (va * va / (na - 1.0) + vb * vb / (nb - 1.0))
    } else {
        na + nb - 2.0
    };
    let t_quantile = t_quantile(0.5 + CONFIDENCE / 2.0, degrees_of_freedom);
    let standard_error = se2.sqrt();
    Some(WelchBound {
        standard_error,
        degrees_of_freedom,
        t_quantile,
        bound: t_quantile * standard_error,
    })
}

/// The `p` quantile (0.5 ≤ p < 1) of Student's t with `nu` > 0 degrees of freedom.
pub fn t_quantile(p: f64, nu: f64) -> f64 {
    debug_assert!((0.5..1.0).contains(&p) && nu > 0.0);
    // The CDF is increasing: widen the bracket until it holds p, then halve it.
    let (mut low, mut high) = (0.0_f64, 1.0_f64);
    while t_cdf(high, nu) < p {
        low = high;
        high *= 2.0;
    }
    for _ in 0..200 {
        let middle = 0.5 * (low + high);
        if t_cdf(middle, nu) < p {
            low = middle;
        } else {
            high = middle;
        }
        if high - low <= 1e-12 * high {
            break;
        }
    }
    0.5 * (low + high)
}

/// P(T ≤ t) for t ≥ 0: 1 − I_x(ν/2, 1/2)/2 with x = ν/(ν + t²).
fn t_cdf(t: f64, nu: f64) -> f64 {
    1.0 - 0.5 * incomplete_beta(nu / (nu + t * t), nu / 2.0, 0.5)
}

/// The regularized incomplete beta function I_x(a, b).
fn incomplete_beta(x: f64, a: f64, b: f64) -> f64 {
    if x <= 0.0 {
        return 0.0;
    }
    if x >= 1.0 {
        return 1.0;
    }
    let front =
        (ln_gamma(a + b) - ln_gamma(a) - ln_gamma(b) + a * x.ln() + b * (1.0 - x).ln()).exp();
    // The continued fraction converges fast below (a + 1)/(a + b + 2); above, by symmetry.
    if x < (a + 1.0) / (a + b + 2.0) {
        front * beta_fraction(x, a, b) / a
    } else {
        1.0 - front * beta_fraction(1.0 - x, b, a) / b
    }
}

/// The continued fraction of the incomplete beta function, by the modified Lentz method.
fn beta_fraction(x: f64, a: f64, b: f64) -> f64 {
    const TINY: f64 = 1e-300;
    let (qab, qap, qam) = (a + b, a + 1.0, a - 1.0);
    let mut c = 1.0;
    let mut d = 1.0 - qab * x / qap;
    if d.abs() < TINY {
        d = TINY;
    }
    d = 1.0 / d;
    let mut h = d;
    for m in 1..=300 {
        let m = f64::from(m);
        let m2 = 2.0 * m;
        for numerator in [
            m * (b - m) * x / ((qam + m2) * (a + m2)),
            -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2)),
        ] {
            d = 1.0 + numerator * d;
            if d.abs() < TINY {
                d = TINY;
            }
            c = 1.0 + numerator / c;
            if c.abs() < TINY {
                c = TINY;
            }
            d = 1.0 / d;
            h *= d * c;
        }
        // The last factor of the pair: converged when it no longer changes h.
        if (d * c - 1.0).abs() < 1e-15 {
            break;
        }
    }
    h
}

/// ln Γ(x) for x > 0, by Lanczos' approximation (g = 7, 9 terms; about 15 digits).
fn ln_gamma(x: f64) -> f64 {
    const G: f64 = 7.0;
    const COEFFICIENTS: [f64; 9] = [
        0.999_999_999_999_809_9,
        676.520_368_121_885_1,
        -1_259.139_216_722_402_8,
        771.323_428_777_653_1,
        -176.615_029_162_140_6,
        12.507_343_278_686_905,
        -0.138_571_095_265_720_12,
        9.984_369_578_019_572e-6,
        1.505_632_735_149_311_6e-7,
    ];
    if x < 0.5 {
        // The reflection formula: Γ(x)Γ(1 − x) = π / sin(πx).
        return (std::f64::consts::PI / (std::f64::consts::PI * x).sin()).ln() - ln_gamma(1.0 - x);
    }
    let x = x - 1.0;
    let mut sum = COEFFICIENTS[0];
    for (i, c) in COEFFICIENTS.iter().enumerate().skip(1) {
        sum += c / (x + i as f64);
    }
    let t = x + G + 0.5;
    0.5 * (2.0 * std::f64::consts::PI).ln() + (x + 0.5) * t.ln() - t + sum.ln()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The 0.975 quantiles, from closed forms (ν = 1: tan(0.475π); ν = 2: 0.95/√(2·0.975·0.025))
    /// and from the t density integrated numerically to 30 digits (the others).
    #[test]
    fn quantiles_match_the_t_table() {
        for (nu, expected) in [
            (1.0, 12.706_204_736_194_92),
            (2.0, 4.302_652_729_749_462),
            (4.0, 2.776_445_105_197_793),
            (10.0, 2.228_138_851_986_274),
            (30.0, 2.042_272_456_301_238),
            (2.5, 3.574_654_842_003_682),
            (1000.0, 1.962_339_080_826_408),
        ] {
            let t = t_quantile(0.975, nu);
            assert!((t - expected).abs() < 1e-9 * expected, "ν = {nu}: {t}");
        }
    }

    /// A = [1, 2, 3], B = [10, 10.5]: s²_A = 1, s²_B = 0.125, so v_A = 1/3, v_B = 1/16, the
    /// standard error √(19/48), and ν = (19/48)² / ((1/3)²/2 + (1/16)²/1) = 722/274 ≈ 2.635,
    /// whose 0.975 quantile (the t density integrated numerically) is 3.446 938 168 771 45.
    #[test]
    fn welch_s_bound_by_hand() {
        let bound = welch(&[1.0, 2.0, 3.0], &[10.0, 10.5]).unwrap();
        let se = (19.0_f64 / 48.0).sqrt();
        assert!((bound.standard_error - se).abs() < 1e-15);
        assert!((bound.degrees_of_freedom - 722.0 / 274.0).abs() < 1e-12);
        assert!((bound.t_quantile - 3.446_938_168_771_45).abs() < 1e-9);
        assert!((bound.bound - 3.446_938_168_771_45 * se).abs() < 1e-9);
        assert_eq!(welch(&[1.0], &[1.0, 2.0]), None);
        // No spread in either run: a bound of 0, and ν the pooled n_A + n_B − 2.
        let flat = welch(&[5.0, 5.0], &[6.0, 6.0, 6.0]).unwrap();
        assert_eq!((flat.bound, flat.degrees_of_freedom), (0.0, 3.0));
    }
}
