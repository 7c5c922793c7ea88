//! Just enough of Kubernetes' `resource.Quantity` to compare and add resource amounts.
//!
//! Values are held as integer **milli-units** (`1` → 1000, `100m` → 100, `1Ki` → 1_024_000), the
//! precision the scheduler and the QoS computation work in
//! (k8s.io/apimachinery/pkg/api/resource/quantity.go: `MilliValue`). Fractions below one
//! milli-unit round up, as `MilliValue` does.

use std::fmt;

/// A quantity string that could not be parsed; carries the offending text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid quantity {0:?}")]
pub struct QuantityError(pub String);

/// A parsed quantity in milli-units (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default, Hash)]
pub struct Milli(pub i128);

impl fmt::Display for Milli {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0 % 1000 == 0 {
            write!(f, "{}", self.0 / 1000)
        } else {
            write!(f, "{}m", self.0)
        }
    }
}

/// Parse a Kubernetes quantity (`"1"`, `"1.5"`, `"100m"`, `"128Mi"`, `"1G"`, `"1e3"`) into
/// milli-units.
///
/// Errors: [`QuantityError`] for an empty string, a malformed number or an unknown suffix.
pub fn parse_quantity(text: &str) -> Result<Milli, QuantityError> {
    let err = || QuantityError(text.to_string());
    let s = text.trim();
    if s.is_empty() {
        return Err(err());
    }
    let (negative, body) = match s.as_bytes()[0] {
        b'-' => (true, &s[1..]),
        b'+' => (false, &s[1..]),
        _ => (false, s),
    };
    let number_end = body
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(body.len());
    let (number, suffix) = body.split_at(number_end);
    if number.is_empty() || number == "." || number.matches('.').count() > 1 {
        return Err(err());
    }
    let (int_part, frac_part) = number.split_once('.').unwrap_or((number, ""));
    let digits = format!("{int_part}{frac_part}");
    let mantissa: i128 = digits.parse().map_err(|_| err())?;
    // value = mantissa / 10^frac_len * 10^exp10 * 2^exp2, all times 1000 for milli-units.
    let frac_len = i32::try_from(frac_part.len()).map_err(|_| err())?;
    let (exp10, exp2): (i32, u32) = match suffix {
        "" => (0, 0),
        "n" => (-9, 0),
        "u" => (-6, 0),
        "m" => (-3, 0),
        "k" => (3, 0),
        "M" => (6, 0),
        "G" => (9, 0),
        "T" => (12, 0),
        "P" => (15, 0),
        "E" => (18, 0),
        "Ki" => (0, 10),
        "Mi" => (0, 20),
        "Gi" => (0, 30),
        "Ti" => (0, 40),
        "Pi" => (0, 50),
        "Ei" => (0, 60),
        other if other.starts_with(['e', 'E']) => {
            let e: i32 = other[1..].parse().map_err(|_| err())?;
            (e, 0)
        }
        _ => return Err(err()),
    };
    let mut numerator = mantissa
        .checked_mul(1i128.checked_shl(exp2).ok_or_else(err)?)
        .ok_or_else(err)?;
    let scale = exp10 + 3 - frac_len;
    let value = if scale >= 0 {
        let factor = 10i128.checked_pow(scale.unsigned_abs()).ok_or_else(err)?;
        numerator = numerator.checked_mul(factor).ok_or_else(err)?;
        numerator
    } else {
        let divisor = 10i128.checked_pow(scale.unsigned_abs()).ok_or_else(err)?;
        // Round up like Quantity.MilliValue().
        (numerator + divisor - 1) / divisor
    };
    Ok(Milli(if negative { -value } else { value }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_plain_and_suffixed_values() {
        assert_eq!(parse_quantity("1"), Ok(Milli(1000)));
        assert_eq!(parse_quantity("100m"), Ok(Milli(100)));
        assert_eq!(parse_quantity("1.5"), Ok(Milli(1500)));
        assert_eq!(parse_quantity("0.5"), Ok(Milli(500)));
        assert_eq!(parse_quantity("1Ki"), Ok(Milli(1_024_000)));
        assert_eq!(parse_quantity("128Mi"), Ok(Milli(128 * 1024 * 1024 * 1000)));
        assert_eq!(parse_quantity("1G"), Ok(Milli(1_000_000_000_000)));
        assert_eq!(parse_quantity("1e3"), Ok(Milli(1_000_000)));
        assert_eq!(parse_quantity("62500u"), Ok(Milli(63)));
        assert_eq!(parse_quantity("1k"), Ok(Milli(1_000_000)));
    }

    #[test]
    fn equal_amounts_in_different_spellings_compare_equal() {
        assert_eq!(parse_quantity("1"), parse_quantity("1000m"));
        assert_eq!(parse_quantity("1Gi"), parse_quantity("1024Mi"));
    }

    #[test]
    fn rejects_garbage() {
        assert!(parse_quantity("").is_err());
        assert!(parse_quantity("abc").is_err());
        assert!(parse_quantity("1.2.3").is_err());
        assert!(parse_quantity("5Xi").is_err());
    }

    #[test]
    fn display_prefers_whole_units() {
        assert_eq!(Milli(2000).to_string(), "2");
        assert_eq!(Milli(250).to_string(), "250m");
    }
}
