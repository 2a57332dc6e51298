//! The functions a query may call: their names, how many arguments each takes, and
//! which aggregate. A name not here is refused as unsupported, never passed through.

/// One supported function.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Function {
    /// The lowercase name (Cypher function names are case-insensitive).
    pub(crate) name: &'static str,
    /// The fewest arguments.
    pub(crate) arguments_min: usize,
    /// The most arguments (`usize::MAX`: any number).
    pub(crate) arguments_max: usize,
    /// Whether it aggregates rows (only in `WITH` and `RETURN`).
    pub(crate) aggregate: bool,
    /// Whether `*` may stand for its argument (`count(*)`: rows, not values).
    pub(crate) star: bool,
}

const fn scalar(name: &'static str, arguments_min: usize, arguments_max: usize) -> Function {
    Function {
        name,
        arguments_min,
        arguments_max,
        aggregate: false,
        star: false,
    }
}

const fn aggregate(name: &'static str) -> Function {
    Function {
        name,
        arguments_min: 1,
        arguments_max: 1,
        aggregate: true,
        star: false,
    }
}

/// Every supported function, `docs/query.md` lists them with an example each.
pub(crate) const FUNCTIONS: &[Function] = &[
    Function {
        star: true,
        ..aggregate("count")
    },
    aggregate("sum"),
    aggregate("avg"),
    aggregate("min"),
    aggregate("max"),
    aggregate("collect"),
    scalar("lower", 1, 1),
    scalar("upper", 1, 1),
    scalar("tolower", 1, 1),
    scalar("toupper", 1, 1),
    scalar("trim", 1, 1),
    scalar("ltrim", 1, 1),
    scalar("rtrim", 1, 1),
    scalar("substring", 2, 3),
    scalar("left", 2, 2),
    scalar("right", 2, 2),
    scalar("replace", 3, 3),
    scalar("size", 1, 1),
    scalar("length", 1, 1),
    scalar("abs", 1, 1),
    scalar("ceil", 1, 1),
    scalar("floor", 1, 1),
    scalar("round", 1, 1),
    scalar("sign", 1, 1),
    scalar("sqrt", 1, 1),
    scalar("coalesce", 1, usize::MAX),
    scalar("tostring", 1, 1),
    scalar("tointeger", 1, 1),
    scalar("tofloat", 1, 1),
];

/// The supported function `name` (any case), if it is one.
pub(crate) fn lookup(name: &str) -> Option<&'static Function> {
    let lowered = name.to_ascii_lowercase();
    FUNCTIONS.iter().find(|function| function.name == lowered)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_lowercase_distinct_and_aggregates_take_one_argument() {
        let mut names: Vec<&str> = FUNCTIONS.iter().map(|function| function.name).collect();
        assert!(names.iter().all(|name| name.to_ascii_lowercase() == *name));
        names.sort_unstable();
        let count = names.len();
        names.dedup();
        assert_eq!(names.len(), count);
        assert!(FUNCTIONS.iter().all(|f| f.arguments_min <= f.arguments_max));
        assert_eq!(lookup("COUNT").map(|f| f.aggregate), Some(true));
        assert_eq!(lookup("toLower").map(|f| f.name), Some("tolower"));
        assert!(lookup("apoc.do.it").is_none());
    }
}
