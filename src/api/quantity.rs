//! Kubernetes resource quantities (`128Mi`, `1G`, `150m`, `2.5`, `1e3`) with apimachinery's
//! exact semantics.
//!
//! Why our own parser: the maintained crates we checked either parse through `f64` (losing
//! exactness for large or long decimal values) or truncate where Kubernetes rounds up, and
//! KubeVirt's overhead formula depends on `Quantity.Value()` rounding *up*
//! (`k8s.io/apimachinery/pkg/api/resource/quantity.go`). The grammar is small:
//!
//! ```text
//! quantity        ::= signedNumber suffix
//! signedNumber    ::= number | sign number
//! sign            ::= "+" | "-"
//! number          ::= digits | digits "." digits | digits "." | "." digits
//! suffix          ::= binarySI | decimalExponent | decimalSI
//! binarySI        ::= Ki | Mi | Gi | Ti | Pi | Ei
//! decimalSI       ::= n | u | m | "" | k | M | G | T | P | E
//! decimalExponent ::= "e" signedNumber | "E" signedNumber   (integer exponent)
//! ```
//!
//! Values are held exactly as an integer count of nano-units (`i128`); like Kubernetes, any
//! precision finer than 10^-9 is rounded up. The on-the-wire type stays
//! [`k8s_openapi::apimachinery::pkg::api::resource::Quantity`] (a string); this module turns it
//! into numbers and back into Kubernetes' canonical text.
//!
//! The parser is exercised by property tests (arbitrary strings never panic; canonical output
//! re-parses to the same value).

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use std::fmt;

/// Nano-units per unit.
const NANO: i128 = 1_000_000_000;

/// The format a quantity was written in; it decides how a computed result is printed
/// (apimachinery `Format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum Format {
    /// Powers of 1024 (`Ki`, `Mi`, ...).
    BinarySI,
    /// Powers of 1000 (`m`, `k`, `M`, ...), also plain numbers.
    DecimalSI,
    /// `1e3` style.
    DecimalExponent,
}

/// Why a quantity string was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QuantityError {
    /// Empty string.
    #[error("quantity is empty")]
    Empty,
    /// The string does not follow the quantity grammar.
    #[error(
        "quantity {0:?} does not match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
    )]
    Syntax(String),
    /// The value does not fit in the range this tool handles (|value| < 1.7e20 units).
    #[error("quantity {0:?} is too large")]
    TooLarge(String),
}

/// An exactly parsed quantity: value in nano-units plus the format to print results in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ParsedQuantity {
    /// Value × 10^9, rounded up (towards +∞) where the input was finer than nano precision.
    pub nanos: i128,
    /// Format of the original text.
    pub format: Format,
}

/// Largest |nanos| we accept: keeps every later multiplication (×1024, ×1000) far from overflow.
const MAX_NANOS: i128 = 1 << 100;

fn ceil_div(a: i128, b: i128) -> i128 {
    // b > 0
    let q = a.div_euclid(b);
    if a.rem_euclid(b) == 0 { q } else { q + 1 }
}

impl ParsedQuantity {
    /// Parse a quantity string with Kubernetes semantics.
    ///
    /// Errors: [`QuantityError::Empty`], [`QuantityError::Syntax`] (e.g. `2Gx`, `1.2.3`,
    /// `Mi`), [`QuantityError::TooLarge`].
    pub fn parse(text: &str) -> Result<Self, QuantityError> {
        let s = text.trim();
        if s.is_empty() {
            return Err(QuantityError::Empty);
        }
        let syntax = || QuantityError::Syntax(text.to_string());
        let too_large = || QuantityError::TooLarge(text.to_string());
        let bytes = s.as_bytes();
        let mut i = 0;
        let mut negative = false;
        if bytes[0] == b'+' || bytes[0] == b'-' {
            negative = bytes[0] == b'-';
            i = 1;
        }
        // Digits before and after the decimal point.
        let int_start = i;
        while i < bytes.len() && bytes[i].is_ascii_digit() {
            i += 1;
        }
        let int_digits = &s[int_start..i];
        let mut frac_digits = "";
        if i < bytes.len() && bytes[i] == b'.' {
            i += 1;
            let frac_start = i;
            while i < bytes.len() && bytes[i].is_ascii_digit() {
                i += 1;
            }
            frac_digits = &s[frac_start..i];
        }
        if int_digits.is_empty() && frac_digits.is_empty() {
            return Err(syntax());
        }
        let suffix = &s[i..];
        // Suffix → (format, power of ten, power of 1024)
        let (format, exp10, exp1024): (Format, i32, u32) = match suffix {
            "" => (Format::DecimalSI, 0, 0),
            "n" => (Format::DecimalSI, -9, 0),
            "u" => (Format::DecimalSI, -6, 0),
            "m" => (Format::DecimalSI, -3, 0),
            "k" => (Format::DecimalSI, 3, 0),
            "M" => (Format::DecimalSI, 6, 0),
            "G" => (Format::DecimalSI, 9, 0),
            "T" => (Format::DecimalSI, 12, 0),
            "P" => (Format::DecimalSI, 15, 0),
            "E" => (Format::DecimalSI, 18, 0),
            "Ki" => (Format::BinarySI, 0, 1),
            "Mi" => (Format::BinarySI, 0, 2),
            "Gi" => (Format::BinarySI, 0, 3),
            "Ti" => (Format::BinarySI, 0, 4),
            "Pi" => (Format::BinarySI, 0, 5),
            "Ei" => (Format::BinarySI, 0, 6),
            other => {
                let rest = other
                    .strip_prefix('e')
                    .or_else(|| other.strip_prefix('E'))
                    .ok_or_else(syntax)?;
                let digits = rest
                    .strip_prefix('+')
                    .or_else(|| rest.strip_prefix('-'))
                    .unwrap_or(rest);
                if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
                    return Err(syntax());
                }
                let e: i32 = rest.parse().map_err(|_| too_large())?;
                (Format::DecimalExponent, e, 0)
            }
        };
        // Mantissa as an integer with `scale` fractional digits, trailing zeros trimmed.
        let frac_trimmed = frac_digits.trim_end_matches('0');
        let mut mantissa: i128 = 0;
        for d in int_digits.bytes().chain(frac_trimmed.bytes()) {
            if mantissa == 0 && d == b'0' {
                continue;
            }
            mantissa = mantissa
                .checked_mul(10)
                .and_then(|m| m.checked_add(i128::from(d - b'0')))
                .filter(|m| *m < MAX_NANOS)
                .ok_or_else(too_large)?;
        }
        // value = mantissa × 10^(exp10 - frac_len) × 1024^exp1024; nanos = value × 10^9.
        let frac_len = i32::try_from(frac_trimmed.len()).map_err(|_| too_large())?;
        let mut pow10 = exp10
            .checked_add(9)
            .and_then(|v| v.checked_sub(frac_len))
            .ok_or_else(too_large)?;
        let mut nanos = mantissa;
        for _ in 0..exp1024 {
            nanos = nanos
                .checked_mul(1024)
                .filter(|m| *m < MAX_NANOS)
                .ok_or_else(too_large)?;
        }
        if nanos != 0 {
            while pow10 > 0 {
                nanos = nanos
                    .checked_mul(10)
                    .filter(|m| *m < MAX_NANOS)
                    .ok_or_else(too_large)?;
                pow10 -= 1;
            }
        }
        if pow10 < 0 {
            // Finer than nano precision: Kubernetes rounds up (away from zero for the
            // magnitude, then the sign applies — `inf.RoundUp`).
            // 10^38 is the largest power of ten an i128 holds; any smaller result is < 1 nano.
            nanos = if pow10 < -38 {
                i128::from(nanos != 0)
            } else {
                ceil_div(nanos, 10i128.pow(pow10.unsigned_abs()))
            };
        }
        if negative {
            nanos = -nanos;
        }
        Ok(ParsedQuantity { nanos, format })
    }

    /// Build from a whole number of units (bytes, cores) in a given format.
    pub(crate) fn from_units(units: i64, format: Format) -> Self {
        ParsedQuantity {
            nanos: i128::from(units) * NANO,
            format,
        }
    }

    /// `Quantity.Value()`: the value in whole units, rounded **up** (`150m` → 1, `2.5` → 3),
    /// saturating at the i64 range.
    pub fn value(&self) -> i64 {
        clamp_i64(ceil_div(self.nanos, NANO))
    }

    /// `Quantity.MilliValue()`: the value in milli-units, rounded up.
    pub(crate) fn milli_value(&self) -> i64 {
        clamp_i64(ceil_div(self.nanos, 1_000_000))
    }

    /// KubeVirt's memory overcommit of a guest size: `resource.NewQuantity(q.Value() * 100 /
    /// percent, q.Format)` (renderresources.go `WithMemoryRequests`; virt-api's
    /// `setDefaultResourceRequests` up to v1.6), saturating. `percent` 100 (or 0, which KubeVirt
    /// rejects) returns the quantity unchanged.
    pub(crate) fn overcommitted(self, percent: u32) -> Self {
        if percent == 100 || percent == 0 {
            return self;
        }
        let v = i128::from(self.value()) * 100 / i128::from(percent);
        ParsedQuantity::from_units(clamp_i64(v), self.format)
    }

    /// `Quantity.ScaledValue(resource.Kilo)`: ceil(value / 1000).
    pub(crate) fn scaled_kilo(&self) -> i64 {
        clamp_i64(ceil_div(self.nanos, NANO * 1000))
    }

    /// True when the value is exactly zero.
    pub(crate) fn is_zero(&self) -> bool {
        self.nanos == 0
    }

    /// Kubernetes' canonical text (`Quantity.String()` after `CanonicalizeBytes`): `300m`,
    /// `62500u`, `1294Mi`, `1306971493`, `2k`.
    pub(crate) fn to_canonical(self) -> String {
        if self.nanos == 0 {
            return "0".to_string();
        }
        let mut format = self.format;
        if format == Format::BinarySI {
            // Small values and non-integers are shown as DecimalSI.
            if self.nanos.abs() < 1024 * NANO || self.nanos % NANO != 0 {
                format = Format::DecimalSI;
            }
        }
        if format == Format::BinarySI {
            let mut units = self.nanos / NANO;
            let mut exp = 0;
            while exp < 6 && units % 1024 == 0 {
                units /= 1024;
                exp += 1;
            }
            let suffix = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"][exp];
            return format!("{units}{suffix}");
        }
        // Decimal: mantissa × 10^exponent with exponent a multiple of 3, trailing zeros
        // removed in whole groups (apimachinery `AsCanonicalBytes`).
        let mut mantissa = self.nanos;
        let mut exponent: i32 = -9;
        while mantissa % 10 == 0 {
            mantissa /= 10;
            exponent += 1;
        }
        while exponent.rem_euclid(3) != 0 {
            mantissa *= 10;
            exponent -= 1;
        }
        if format == Format::DecimalExponent {
            return if exponent == 0 {
                format!("{mantissa}")
            } else {
                format!("{mantissa}e{exponent}")
            };
        }
        let suffix = match exponent {
            -9 => "n",
            -6 => "u",
            -3 => "m",
            0 => "",
            3 => "k",
            6 => "M",
            9 => "G",
            12 => "T",
            15 => "P",
            18 => "E",
            _ => {
                // Beyond E: print with an exponent, as Kubernetes does.
                return format!("{mantissa}e{exponent}");
            }
        };
        format!("{mantissa}{suffix}")
    }

    /// As a k8s-openapi [`Quantity`] in canonical text.
    pub(crate) fn to_quantity(self) -> Quantity {
        Quantity(self.to_canonical())
    }
}

/// Sum, keeping the left operand's format (apimachinery `Quantity.Add`); saturating.
impl std::ops::Add for ParsedQuantity {
    type Output = ParsedQuantity;
    fn add(self, other: ParsedQuantity) -> ParsedQuantity {
        ParsedQuantity {
            nanos: self.nanos.saturating_add(other.nanos),
            format: self.format,
        }
    }
}

/// Difference, keeping the left operand's format (apimachinery `Quantity.Sub`); saturating.
impl std::ops::Sub for ParsedQuantity {
    type Output = ParsedQuantity;
    fn sub(self, other: ParsedQuantity) -> ParsedQuantity {
        ParsedQuantity {
            nanos: self.nanos.saturating_sub(other.nanos),
            format: self.format,
        }
    }
}

impl fmt::Display for ParsedQuantity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_canonical())
    }
}

fn clamp_i64(v: i128) -> i64 {
    i64::try_from(v).unwrap_or(if v < 0 { i64::MIN } else { i64::MAX })
}

/// Parse a k8s-openapi [`Quantity`].
pub(crate) fn parse(q: &Quantity) -> Result<ParsedQuantity, QuantityError> {
    ParsedQuantity::parse(&q.0)
}

/// Bytes as a kubectl-style binary quantity, the one form every output uses (progress lines,
/// what-if, explain-overhead): exact (`512Mi`, `4Gi`, `1024`)
/// when the value is a whole number of the unit, otherwise rounded to two decimals in the
/// largest unit that keeps it ≥ 1 (`4680843265` → `4.36Gi`); `Ki` is used exactly only below 1Mi.
pub fn human_bytes(bytes: i64) -> String {
    const UNITS: [(&str, i64); 5] = [
        ("Pi", 1 << 50),
        ("Ti", 1 << 40),
        ("Gi", 1 << 30),
        ("Mi", 1 << 20),
        ("Ki", 1 << 10),
    ];
    if bytes == 0 {
        return "0".into();
    }
    let abs = bytes.unsigned_abs();
    for (suffix, size) in UNITS {
        let size = size as u64;
        // Exact in Ki only below 1Mi: `405760Ki` is exact but `396.25Mi` is what a reader wants.
        if suffix == "Ki" && abs >= 1 << 20 {
            continue;
        }
        if abs >= size && abs.is_multiple_of(size) {
            return format!("{}{suffix}", bytes / size as i64);
        }
    }
    for (suffix, size) in UNITS {
        if abs >= size as u64 {
            let v = bytes as f64 / size as f64;
            return format!("{v:.2}{suffix}");
        }
    }
    bytes.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn p(s: &str) -> ParsedQuantity {
        ParsedQuantity::parse(s).unwrap()
    }

    #[test]
    fn parses_suffixes_exactly() {
        assert_eq!(p("128Mi").value(), 128 * 1024 * 1024);
        assert_eq!(p("1G").value(), 1_000_000_000);
        assert_eq!(p("1Gi").value(), 1 << 30);
        assert_eq!(p("1024M").value(), 1_024_000_000);
        assert_eq!(p("64M").value(), 64_000_000);
        assert_eq!(p("1e3").value(), 1000);
        assert_eq!(p("1E3").value(), 1000);
        assert_eq!(p("5e-1").milli_value(), 500);
        assert_eq!(p(".5").milli_value(), 500);
        assert_eq!(p("5.").value(), 5);
        assert_eq!(p("+2").value(), 2);
        assert_eq!(p("0.5Gi").value(), 512 * 1024 * 1024);
        assert_eq!(p("1Ei").value(), 1 << 60);
    }

    /// `Value()` rounds up: facts "Conventions" (150m → 1, 2.5 → 3).
    #[test]
    fn value_rounds_up() {
        assert_eq!(p("150m").value(), 1);
        assert_eq!(p("2.5").value(), 3);
        assert_eq!(p("2").value(), 2);
        assert_eq!(p("1001m").value(), 2);
        assert_eq!(p("-2.5").value(), -2);
        assert_eq!(p("1n").value(), 1);
        // Finer than nano is rounded up to the next nano.
        assert_eq!(p("0.0000000001").nanos, 1);
        assert_eq!(p("1.5n").nanos, 2);
    }

    #[test]
    fn scaled_kilo_matches_kubevirt_page_table_input() {
        // facts §5 term 1: 1G → ceil(1e9/1000) = 1e6; 1Gi → ceil(1073741824/1000).
        assert_eq!(p("1G").scaled_kilo(), 1_000_000);
        assert_eq!(p("1Gi").scaled_kilo(), 1_073_742);
    }

    #[test]
    fn rejects_bad_input() {
        assert!(ParsedQuantity::parse("1e2147483647").is_err());
        assert_eq!(p("0e-50").nanos, 0);
        assert_eq!(p("5e-50").nanos, 1);
        for bad in [
            "", "2Gx", "Mi", "1.2.3", "1e", "1e+", "abc", "1 Gi", "--1", "1ki", "e3",
        ] {
            assert!(
                ParsedQuantity::parse(bad).is_err(),
                "{bad:?} should be rejected"
            );
        }
        assert!(matches!(
            ParsedQuantity::parse("99999999999999999999999999999999999999999Ei"),
            Err(QuantityError::TooLarge(_))
        ));
    }

    /// Canonical forms as Kubernetes prints them (apimachinery quantity_test.go style cases).
    #[test]
    fn canonical_text() {
        assert_eq!(p("0.3").to_canonical(), "300m");
        assert_eq!(p("0.0625").to_canonical(), "62500u");
        assert_eq!(p("1.1").to_canonical(), "1100m");
        assert_eq!(p("1").to_canonical(), "1");
        assert_eq!(p("2000").to_canonical(), "2k");
        assert_eq!(p("1500").to_canonical(), "1500");
        assert_eq!(p("1G").to_canonical(), "1G");
        assert_eq!(p("1024Mi").to_canonical(), "1Gi");
        assert_eq!(p("1536").to_canonical(), "1536");
        assert_eq!(p("1536Ki").to_canonical(), "1536Ki");
        assert_eq!((p("100Mi") + p("1Mi")).to_canonical(), "101Mi");
        // BinarySI that is not a multiple of 1024 falls back to decimal.
        assert_eq!((p("1Gi") + p("1000")).to_canonical(), "1073742824");
        assert_eq!(p("512").to_canonical(), "512");
        assert_eq!(p("0").to_canonical(), "0");
        assert_eq!(p("1e3").to_canonical(), "1e3");
        assert_eq!(p("-300m").to_canonical(), "-300m");
    }

    proptest! {
        #[test]
        fn never_panics(s in "\\PC{0,24}") {
            let _ = ParsedQuantity::parse(&s);
        }

        #[test]
        fn grammar_like_strings_never_panic(s in "[+-]?[0-9]{0,30}(\\.[0-9]{0,30})?([numkMGTPE]|[KMGTPE]i|[eE][+-]?[0-9]{1,4})?") {
            let _ = ParsedQuantity::parse(&s);
        }

        #[test]
        fn canonical_round_trips(units in -1_000_000_000_000i64..1_000_000_000_000i64, millis in 0i64..1000, binary in any::<bool>()) {
            let format = if binary { Format::BinarySI } else { Format::DecimalSI };
            let q = ParsedQuantity { nanos: i128::from(units) * NANO + i128::from(millis) * 1_000_000, format };
            let text = q.to_canonical();
            let back = ParsedQuantity::parse(&text).unwrap();
            prop_assert_eq!(back.nanos, q.nanos, "{}", text);
        }
    }
}
