//! Resource amounts in **milli-units** (`1` → 1000, `100m` → 100, `1Ki` → 1_024_000), the
//! precision the scheduler and the QoS computation work in (apimachinery `MilliValue`, which
//! rounds fractions below one milli-unit up). Parsing is [`crate::api::quantity`]'s.

use crate::api::quantity::{ParsedQuantity, QuantityError};
use std::fmt;

/// A quantity in milli-units (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default, Hash)]
pub(crate) struct Milli(pub i128);

impl fmt::Display for Milli {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0 % 1000 == 0 {
            write!(f, "{}", self.0 / 1000)
        } else {
            write!(f, "{}m", self.0)
        }
    }
}

/// Parse a Kubernetes quantity into milli-units, rounding up like `MilliValue`.
pub(crate) fn parse_quantity(text: &str) -> Result<Milli, QuantityError> {
    let q = ParsedQuantity::parse(text)?;
    Ok(Milli(
        q.nanos.div_euclid(1_000_000) + i128::from(q.nanos.rem_euclid(1_000_000) != 0),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn milli_units() {
        assert_eq!(parse_quantity("1").unwrap(), Milli(1000));
        assert_eq!(parse_quantity("100m").unwrap(), Milli(100));
        assert_eq!(parse_quantity("1Ki").unwrap(), Milli(1_024_000));
        assert_eq!(parse_quantity("1n").unwrap(), Milli(1));
        assert!(parse_quantity("x").is_err());
        assert_eq!(Milli(1500).to_string(), "1500m");
        assert_eq!(Milli(2000).to_string(), "2");
    }
}
