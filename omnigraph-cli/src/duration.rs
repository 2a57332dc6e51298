//! Durations on the command line: a whole number and a unit (`90s`, `30m`, `12h`, `7d`).

use std::time::Duration;

/// The longest duration accepted: about 100 years.
const DURATION_SECS_MAX: u64 = 100 * 365 * 24 * 60 * 60;

/// Parses `<n><unit>` with unit `s`, `m`, `h` or `d`.
pub(crate) fn parse(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .ok_or_else(|| format!("{text:?} has no unit: write it as 90s, 30m, 12h or 7d"))?;
    let (number, unit) = text.split_at(split);
    let number: u64 = number
        .parse()
        .map_err(|_| format!("{text:?} does not start with a whole number"))?;
    let unit_secs = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 60 * 60,
        "d" => 24 * 60 * 60,
        other => {
            return Err(format!(
                "unknown unit {other:?} in {text:?}: use s, m, h or d"
            ));
        }
    };
    let secs = number
        .checked_mul(unit_secs)
        .filter(|secs| *secs <= DURATION_SECS_MAX)
        .ok_or_else(|| format!("{text:?} is longer than 100 years"))?;
    Ok(Duration::from_secs(secs))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_with_their_unit_or_are_refused() {
        assert_eq!(parse("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse("7d"), Ok(Duration::from_secs(7 * 86_400)));
        assert_eq!(parse("12h"), Ok(Duration::from_secs(12 * 3_600)));
        for bad in ["", "7", "d", "7w", "-1d", "1.5h", "99999999999999999d"] {
            assert!(parse(bad).is_err(), "{bad:?}");
        }
    }
}
