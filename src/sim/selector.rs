//! Label and field selectors, parsed like `k8s.io/apimachinery/pkg/labels/selector.go` and
//! `k8s.io/apimachinery/pkg/fields/selector.go` and matched against JSON objects.

use serde_json::Value;

use super::resources::ResourceDef;
use super::stored::Stored;

/// One label requirement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum LabelReq {
    /// `k=v`, `k==v`, `k in (a,b)`.
    In(String, Vec<String>),
    /// `k!=v`, `k notin (a,b)` (also true when the label is absent).
    NotIn(String, Vec<String>),
    /// `k`.
    Exists(String),
    /// `!k`.
    DoesNotExist(String),
    /// `k>n` / `k<n` (integer comparison, as `selection.GreaterThan`/`LessThan`).
    Gt(String, i64),
    /// See [`LabelReq::Gt`].
    Lt(String, i64),
}

/// A parsed label selector: all requirements must hold (empty selects everything).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct LabelSelector {
    /// The requirements, ANDed.
    pub reqs: Vec<LabelReq>,
}

/// One field requirement: `field=value` or `field!=value`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FieldReq {
    /// Dotted field label (`spec.nodeName`).
    pub field: String,
    /// Expected value.
    pub value: String,
    /// `!=` instead of `=`.
    pub negate: bool,
}

/// A parsed field selector (ANDed requirements).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct FieldSelector {
    /// The requirements.
    pub reqs: Vec<FieldReq>,
}

/// Label selector plus field selector: the filter of a list or watch.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Filter {
    /// Label part.
    pub labels: LabelSelector,
    /// Field part.
    pub fields: FieldSelector,
}

impl Filter {
    /// Whether `obj` matches both selectors.
    pub(crate) fn matches(&self, obj: &Value) -> bool {
        self.labels.matches(obj) && self.fields.matches(obj)
    }

    /// Whether the stored object matches both selectors. A label selector alone reads only the
    /// labels from the bytes ([`Stored::labels`]); a field selector decodes the object.
    pub(crate) fn matches_stored(&self, obj: &Stored) -> bool {
        if self.fields.reqs.is_empty()
            && let Some(labels) = obj.labels()
        {
            return self
                .labels
                .matches_labels(|k| labels.get(k).map(String::as_str));
        }
        self.matches(&obj.decode())
    }

    /// No requirements at all.
    pub(crate) fn is_empty(&self) -> bool {
        self.labels.reqs.is_empty() && self.fields.reqs.is_empty()
    }
}

fn is_alnum(c: char) -> bool {
    c.is_ascii_alphanumeric()
}

/// `IsQualifiedName`: `[prefix/]name`, name ≤63 chars of `[A-Za-z0-9_.-]` starting/ending
/// alphanumeric; prefix a DNS subdomain.
pub(crate) fn validate_label_key(key: &str) -> Result<(), String> {
    let (prefix, name) = match key.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    if let Some(p) = prefix {
        if p.is_empty() {
            return Err("prefix part must be non-empty".into());
        }
        if !is_dns_subdomain(p) {
            return Err(String::from(
                "prefix part a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')",
            ));
        }
    }
    if name.is_empty() {
        return Err("name part must be non-empty".into());
    }
    if name.len() > 63 {
        return Err("name part must be no more than 63 characters".into());
    }
    if !valid_label_chars(name) {
        return Err("name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')".into());
    }
    Ok(())
}

fn valid_label_chars(s: &str) -> bool {
    let first = s.chars().next();
    let last = s.chars().last();
    matches!(first, Some(c) if is_alnum(c))
        && matches!(last, Some(c) if is_alnum(c))
        && s.chars()
            .all(|c| is_alnum(c) || c == '-' || c == '_' || c == '.')
}

/// `IsValidLabelValue`: empty, or ≤63 chars of `[A-Za-z0-9_.-]` starting/ending alphanumeric.
pub(crate) fn validate_label_value(v: &str) -> Result<(), String> {
    if v.is_empty() {
        return Ok(());
    }
    if v.len() > 63 {
        return Err("must be no more than 63 characters".into());
    }
    if !valid_label_chars(v) {
        return Err("a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')".into());
    }
    Ok(())
}

/// `IsDNS1123Subdomain`.
/// `IsDNS1123Subdomain`: at most 253 characters matching
/// `[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*`; the parts between dots have
/// no length limit of their own (names such as `vm-instancetype-v1beta1-<uid>-1` are longer than
/// a label).
pub(crate) fn is_dns_subdomain(s: &str) -> bool {
    let part_ok = |p: &str| {
        !p.is_empty()
            && p.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
            && !p.starts_with('-')
            && !p.ends_with('-')
    };
    !s.is_empty() && s.len() <= 253 && s.split('.').all(part_ok)
}

/// `IsDNS1123Label`.
pub(crate) fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Ident(String),
    Eq,
    DoubleEq,
    NotEq,
    Bang,
    Gt,
    Lt,
    Comma,
    Open,
    Close,
}

fn lex(s: &str) -> Result<Vec<Tok>, String> {
    let mut out = Vec::new();
    let chars: Vec<char> = s.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let followed_by_eq = chars.get(i + 1) == Some(&'=');
        // The token at `i` and its length in characters (`None`: white space or identifier).
        let tok = match c {
            ',' => Some((Tok::Comma, 1)),
            '(' => Some((Tok::Open, 1)),
            ')' => Some((Tok::Close, 1)),
            '>' => Some((Tok::Gt, 1)),
            '<' => Some((Tok::Lt, 1)),
            '=' if followed_by_eq => Some((Tok::DoubleEq, 2)),
            '=' => Some((Tok::Eq, 1)),
            '!' if followed_by_eq => Some((Tok::NotEq, 2)),
            '!' => Some((Tok::Bang, 1)),
            _ => None,
        };
        if let Some((t, len)) = tok {
            out.push(t);
            i += len;
            continue;
        }
        match c {
            ' ' | '\t' | '\n' => i += 1,
            _ => {
                let start = i;
                while i < chars.len() && !" \t\n,()=!<>".contains(chars[i]) {
                    i += 1;
                }
                out.push(Tok::Ident(chars[start..i].iter().collect()));
            }
        }
    }
    Ok(out)
}

impl LabelSelector {
    /// Parse a label selector string. Errors carry the message the real server puts in its
    /// 400 BadRequest (`unable to parse requirement: ...`).
    pub(crate) fn parse(s: &str) -> Result<Self, String> {
        let toks = lex(s)?;
        let mut reqs = Vec::new();
        let mut i = 0;
        if toks.is_empty() {
            return Ok(Self { reqs });
        }
        loop {
            let (req, next) = parse_req(&toks, i)?;
            reqs.push(req);
            i = next;
            match toks.get(i) {
                None => break,
                Some(Tok::Comma) => {
                    i += 1;
                    if i >= toks.len() {
                        return Err("found '', expected: identifier after ','".into());
                    }
                }
                Some(t) => {
                    return Err(format!(
                        "found '{}', expected: ',' or 'end of string'",
                        tok_str(t)
                    ));
                }
            }
        }
        Ok(Self { reqs })
    }

    /// Whether the labels of `obj` (`metadata.labels`) satisfy every requirement.
    pub(crate) fn matches(&self, obj: &Value) -> bool {
        let labels = obj.pointer("/metadata/labels").and_then(Value::as_object);
        self.matches_labels(|k| labels.and_then(|m| m.get(k)).and_then(Value::as_str))
    }

    /// Whether labels read through `get` (a label's value by key) satisfy every requirement.
    pub(crate) fn matches_labels<'a>(&self, get: impl Fn(&str) -> Option<&'a str>) -> bool {
        self.reqs.iter().all(|r| match r {
            LabelReq::In(k, vs) => get(k).is_some_and(|v| vs.iter().any(|x| x == v)),
            LabelReq::NotIn(k, vs) => get(k).is_none_or(|v| !vs.iter().any(|x| x == v)),
            LabelReq::Exists(k) => get(k).is_some(),
            LabelReq::DoesNotExist(k) => get(k).is_none(),
            LabelReq::Gt(k, n) => get(k)
                .and_then(|v| v.parse::<i64>().ok())
                .is_some_and(|v| v > *n),
            LabelReq::Lt(k, n) => get(k)
                .and_then(|v| v.parse::<i64>().ok())
                .is_some_and(|v| v < *n),
        })
    }
}

fn tok_str(t: &Tok) -> String {
    match t {
        Tok::Ident(s) => s.clone(),
        Tok::Eq => "=".into(),
        Tok::DoubleEq => "==".into(),
        Tok::NotEq => "!=".into(),
        Tok::Bang => "!".into(),
        Tok::Gt => ">".into(),
        Tok::Lt => "<".into(),
        Tok::Comma => ",".into(),
        Tok::Open => "(".into(),
        Tok::Close => ")".into(),
    }
}

fn check_key(k: &str) -> Result<(), String> {
    validate_label_key(k)
        .map_err(|e| format!("unable to parse requirement: key: Invalid value: {k:?}: {e}"))
}

fn check_value(v: &str, idx: usize) -> Result<(), String> {
    validate_label_value(v).map_err(|e| {
        format!("unable to parse requirement: values[{idx}][{v}]: Invalid value: {v:?}: {e}")
    })
}

fn parse_req(toks: &[Tok], mut i: usize) -> Result<(LabelReq, usize), String> {
    if toks.get(i) == Some(&Tok::Bang) {
        i += 1;
        return match toks.get(i) {
            Some(Tok::Ident(k)) => {
                check_key(k)?;
                Ok((LabelReq::DoesNotExist(k.clone()), i + 1))
            }
            other => Err(format!(
                "found '{}', expected: identifier",
                other.map(tok_str).unwrap_or_default()
            )),
        };
    }
    let key = match toks.get(i) {
        Some(Tok::Ident(k)) => k.clone(),
        other => {
            return Err(format!(
                "found '{}', expected: !, identifier, or 'end of string'",
                other.map(tok_str).unwrap_or_default()
            ));
        }
    };
    check_key(&key)?;
    i += 1;
    match toks.get(i) {
        None | Some(Tok::Comma) => Ok((LabelReq::Exists(key), i)),
        Some(Tok::Eq) | Some(Tok::DoubleEq) | Some(Tok::NotEq) => {
            let neg = toks[i] == Tok::NotEq;
            i += 1;
            let value = match toks.get(i) {
                Some(Tok::Ident(v)) => {
                    i += 1;
                    v.clone()
                }
                None | Some(Tok::Comma) => String::new(),
                Some(t) => {
                    return Err(format!("found '{}', expected: identifier", tok_str(t)));
                }
            };
            check_value(&value, 0)?;
            let req = if neg {
                LabelReq::NotIn(key, vec![value])
            } else {
                LabelReq::In(key, vec![value])
            };
            Ok((req, i))
        }
        Some(Tok::Gt) | Some(Tok::Lt) => {
            let gt = toks[i] == Tok::Gt;
            i += 1;
            let v = match toks.get(i) {
                Some(Tok::Ident(v)) => v.clone(),
                _ => return Err("found '', expected: identifier".into()),
            };
            let n: i64 = v.parse().map_err(|_| {
                format!(
                    "unable to parse requirement: values[0]: Invalid value: {v:?}: for 'Gt', 'Lt' operators, the value must be an integer"
                )
            })?;
            let req = if gt {
                LabelReq::Gt(key, n)
            } else {
                LabelReq::Lt(key, n)
            };
            Ok((req, i + 1))
        }
        Some(Tok::Ident(op)) if op == "in" || op == "notin" => {
            let notin = op == "notin";
            i += 1;
            if toks.get(i) != Some(&Tok::Open) {
                return Err(format!(
                    "found '{}', expected: '('",
                    toks.get(i).map(tok_str).unwrap_or_default()
                ));
            }
            i += 1;
            let mut values = Vec::new();
            loop {
                match toks.get(i) {
                    Some(Tok::Ident(v)) => {
                        check_value(v, values.len())?;
                        values.push(v.clone());
                        i += 1;
                    }
                    Some(Tok::Close) if values.is_empty() => {
                        return Err("for 'in', 'notin' operators, values set can't be empty".into());
                    }
                    Some(Tok::Comma) => {
                        // empty value between commas
                        values.push(String::new());
                    }
                    other => {
                        return Err(format!(
                            "found '{}', expected: ',', ')' or identifier",
                            other.map(tok_str).unwrap_or_default()
                        ));
                    }
                }
                match toks.get(i) {
                    Some(Tok::Comma) => i += 1,
                    Some(Tok::Close) => {
                        i += 1;
                        break;
                    }
                    other => {
                        return Err(format!(
                            "found '{}', expected: ',' or ')'",
                            other.map(tok_str).unwrap_or_default()
                        ));
                    }
                }
            }
            let req = if notin {
                LabelReq::NotIn(key, values)
            } else {
                LabelReq::In(key, values)
            };
            Ok((req, i))
        }
        Some(t) => Err(format!(
            "found '{}', expected: in, notin, =, ==, !=, gt, lt",
            tok_str(t)
        )),
    }
}

impl FieldSelector {
    /// Parse `a=b,c!=d` (`fields.ParseSelector`), then check every field label is supported by
    /// `def` (`field label not supported: x`, the real server's 400 text).
    pub(crate) fn parse(s: &str, def: &ResourceDef) -> Result<Self, String> {
        let mut reqs = Vec::new();
        for part in split_unescaped_commas(s) {
            let part = part.trim();
            if part.is_empty() {
                continue;
            }
            let (field, value, negate) = if let Some((f, v)) = part.split_once("!=") {
                (f, v, true)
            } else if let Some((f, v)) = part.split_once("==") {
                (f, v, false)
            } else if let Some((f, v)) = part.split_once('=') {
                (f, v, false)
            } else {
                return Err(format!(
                    "invalid selector: '{s}'; can't understand '{part}'"
                ));
            };
            let field = field.trim();
            if !def.supports_field(field) {
                return Err(format!("field label not supported: {field}"));
            }
            reqs.push(FieldReq {
                field: field.to_string(),
                value: unescape(value),
                negate,
            });
        }
        Ok(Self { reqs })
    }

    /// Whether every requirement holds for `obj`. A missing field compares as `""`.
    pub(crate) fn matches(&self, obj: &Value) -> bool {
        self.reqs.iter().all(|r| {
            let actual = field_value(obj, &r.field);
            (actual == r.value) != r.negate
        })
    }
}

fn split_unescaped_commas(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut esc = false;
    for c in s.chars() {
        if esc {
            cur.push('\\');
            cur.push(c);
            esc = false;
        } else if c == '\\' {
            esc = true;
        } else if c == ',' {
            out.push(std::mem::take(&mut cur));
        } else {
            cur.push(c);
        }
    }
    out.push(cur);
    out
}

fn unescape(v: &str) -> String {
    let mut out = String::new();
    let mut esc = false;
    for c in v.chars() {
        if esc {
            out.push(c);
            esc = false;
        } else if c == '\\' {
            esc = true;
        } else {
            out.push(c);
        }
    }
    out
}

/// The string value of a dotted field label in `obj` (`""` when absent; booleans and numbers
/// are printed, as the real field-set functions do with `strconv`).
pub(crate) fn field_value(obj: &Value, field: &str) -> String {
    // events.k8s.io `source` in core events is an object; the real label is `source.component`.
    let field = if field == "source" {
        "source.component"
    } else {
        field
    };
    let mut cur = obj;
    for part in field.split('.') {
        match cur.get(part) {
            Some(v) => cur = v,
            None => return String::new(),
        }
    }
    match cur {
        Value::String(s) => s.clone(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::resources::{Registry, builtin_resources};
    use serde_json::json;

    fn obj(labels: Value) -> Value {
        json!({"metadata": {"name": "a", "namespace": "ns", "labels": labels}, "spec": {"nodeName": "n1"}, "status": {"phase": "Running"}})
    }

    #[test]
    fn equality_and_sets() {
        let o = obj(json!({"app": "web", "tier": "fe", "n": "5"}));
        let m = |s: &str| LabelSelector::parse(s).unwrap().matches(&o);
        for s in [
            "",
            "app=web",
            "app==web",
            "app in (web, db)",
            "tier notin (be)",
            "missing notin (x)",
            "app",
            "!missing",
            "app=web,tier=fe",
            "n>4",
            "example.com/x notin (y)",
        ] {
            assert!(m(s), "{s:?} matches");
        }
        for s in [
            "app!=web",
            "app notin (web,db)",
            "!app",
            "app=web,tier=be",
            "n<4",
        ] {
            assert!(!m(s), "{s:?} does not match");
        }
    }

    #[test]
    fn bad_label_selectors_are_errors() {
        for s in [
            "app in web",
            "app=(x",
            "a b",
            "app=web,",
            "!",
            "app in ()",
            "a==b==c",
            "bad key=x",
            "x=b@d",
        ] {
            assert!(LabelSelector::parse(s).is_err(), "{s} should fail");
        }
    }

    #[test]
    fn field_selectors() {
        let reg = Registry::new(builtin_resources());
        let pods = reg.get(reg.core("pods").unwrap());
        let o = obj(json!({}));
        let m = |s: &str| FieldSelector::parse(s, pods).unwrap().matches(&o);
        assert!(m("spec.nodeName=n1"));
        assert!(m("spec.nodeName==n1,status.phase!=Failed"));
        assert!(!m("spec.nodeName!=n1"));
        assert!(m("metadata.name=a,metadata.namespace=ns"));
        assert!(m("spec.nodeName!="));
        assert_eq!(
            FieldSelector::parse("spec.foo=x", pods).unwrap_err(),
            "field label not supported: spec.foo"
        );
        assert!(FieldSelector::parse("nonsense", pods).is_err());
    }

    #[test]
    fn a_stored_object_matches_as_its_tree_does() {
        let reg = Registry::new(builtin_resources());
        let pods = reg.get(reg.core("pods").unwrap());
        let objects = [
            obj(json!({"kubevirt.io": "virt-launcher", "n": "7"})),
            obj(json!({"app": "x"})),
            obj(json!(null)),
            // Not a map of strings: read by decoding the object.
            obj(json!({"kubevirt.io": 1})),
        ];
        for (labels, fields) in [
            ("kubevirt.io", ""),
            ("!kubevirt.io", ""),
            ("kubevirt.io=virt-launcher,n>5", ""),
            ("app in (x,y)", ""),
            ("app notin (x)", ""),
            ("", "spec.nodeName=n1"),
            ("kubevirt.io", "spec.nodeName!=n1"),
        ] {
            let filter = Filter {
                labels: LabelSelector::parse(labels).unwrap(),
                fields: FieldSelector::parse(fields, pods).unwrap(),
            };
            for o in &objects {
                let stored = Stored::encode(o);
                assert_eq!(
                    filter.matches_stored(&stored),
                    filter.matches(o),
                    "{labels} {fields} {o}"
                );
            }
        }
    }

    proptest::proptest! {
        #[test]
        fn parsers_never_panic(s in "[a-z=!(),. /<>0-9-]{0,40}") {
            let reg = Registry::new(builtin_resources());
            let pods = reg.get(reg.core("pods").unwrap());
            let _ = LabelSelector::parse(&s);
            let _ = FieldSelector::parse(&s, pods);
        }
    }

    #[test]
    fn dns_names() {
        assert!(is_dns_subdomain("a.b-c.d"));
        assert!(!is_dns_subdomain("A"));
        assert!(!is_dns_subdomain("-a"));
        // No 63-character limit between dots (a label's limit): an instancetype revision name.
        let long = format!("vm-{}-v1beta1-{}-1", "i".repeat(40), "u".repeat(36));
        assert!(long.len() > 63 && is_dns_subdomain(&long));
        assert!(!is_dns_label(&long));
        assert!(!is_dns_subdomain(&"a".repeat(254)));
        assert!(is_dns_label("abc-1"));
        assert!(!is_dns_label("a.b"));
    }
}
