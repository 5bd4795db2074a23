//! A `LabeledError` rendered the way nu 0.115 renders errors when its stderr is not a
//! terminal: the code, the message, the source line with underlined labels, the help.
//!
//! The source is the synthesised command line ([`crate::args::Source`]); labels whose spans
//! fall outside it are listed as plain text so nothing the plugin said is lost.

use crate::msg::LabeledError;

/// Renders `e` against `source`.
pub fn render(e: &LabeledError, source: &str) -> String {
    let mut out = String::new();
    // nu shows an error without a code under its generic one.
    let code = e.code.as_deref().unwrap_or("nu::shell::error");
    out.push_str(&format!("Error: {code}\n\n  x {}\n", e.msg));
    let mut inside: Vec<(usize, usize, &str)> = Vec::new();
    let mut outside: Vec<&str> = Vec::new();
    for (text, span) in &e.labels {
        match span {
            Some(s) if s.start <= s.end && s.end <= source.len() && !source.is_empty() => {
                let col = |b: usize| source.get(..b).map_or(b, |s| s.chars().count());
                inside.push((col(s.start), col(s.end).max(col(s.start)), text.as_str()));
            }
            _ if !text.is_empty() => outside.push(text),
            _ => {}
        }
    }
    if !inside.is_empty() {
        inside.sort_by_key(|l| l.0);
        out.push_str(&format!("   ,-[source:1:{}]\n", inside[0].0 + 1));
        out.push_str(&format!(" 1 | {source}\n"));
        // One underline row for all labels, then one row per label, last label first.
        let mut marks = String::new();
        let mut pivots = Vec::new();
        for &(start, end, _) in &inside {
            let width = end.saturating_sub(start);
            let pivot = start + width / 2;
            while marks.chars().count() < start {
                marks.push(' ');
            }
            for c in start..end.max(start + 1) {
                marks.push(if c == pivot { '|' } else { '^' });
            }
            pivots.push(pivot);
        }
        out.push_str(&format!("   : {}\n", marks.trim_end()));
        for (k, &(_, _, text)) in inside.iter().enumerate().rev() {
            let mut row = String::new();
            for (m, &p) in pivots.iter().enumerate().take(k + 1) {
                while row.chars().count() < p {
                    row.push(' ');
                }
                row.push(if m == k { '`' } else { '|' });
            }
            out.push_str(&format!("   : {row}-- {text}\n"));
        }
        out.push_str("   `----\n");
    }
    for text in outside {
        out.push_str(&format!("  label: {text}\n"));
    }
    if let Some(help) = &e.help {
        out.push_str(&wrap("  help: ", help));
    }
    if let Some(url) = &e.url {
        out.push_str(&format!("  url: {url}\n"));
    }
    for inner in &e.inner {
        for line in render(inner, source).lines() {
            out.push_str(&format!("  {line}\n"));
        }
    }
    out
}

/// Greedy word wrap to lines of at most 79 columns (as nu does), continuation lines indented under the first.
fn wrap(prefix: &str, text: &str) -> String {
    let indent = " ".repeat(prefix.len());
    let mut out = String::new();
    for (n, para) in text.split('\n').enumerate() {
        let mut line = if n == 0 {
            prefix.to_owned()
        } else {
            indent.clone()
        };
        let mut empty = true;
        for word in para.split(' ') {
            if !empty && line.chars().count() + 1 + word.chars().count() > 79 {
                out.push_str(line.trim_end());
                out.push('\n');
                line = indent.clone();
                empty = true;
            }
            if !empty {
                line.push(' ');
            }
            line.push_str(word);
            empty = false;
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::msg::Span;

    #[test]
    fn matches_nus_rendering_of_a_parser_error() {
        // `nu --no-config-file -c 'str replace --foo a b'`, 0.115.1, stderr not a tty.
        let mut e = LabeledError::msg("The `str replace` command doesn't have flag `foo`.")
            .label("unknown flag", Span::new(12, 17))
            .help("Use `--help` to see available flags");
        e.code = Some("nu::parser::unknown_flag".into());
        assert_eq!(
            render(&e, "str replace --foo a b"),
            "Error: nu::parser::unknown_flag\n\n  x The `str replace` command doesn't have flag `foo`.\n   ,-[source:1:13]\n 1 | str replace --foo a b\n   :             ^^|^^\n   :               `-- unknown flag\n   `----\n  help: Use `--help` to see available flags\n"
        );
    }

    #[test]
    fn wraps_help_like_nu() {
        let e = LabeledError {
            code: Some("nu::parser::missing_positional".into()),
            ..LabeledError::msg("Missing required positional argument.")
        }
        .help("Usage: str replace {flags} <find> <replace> ...(rest) . Use `--help` for more information.");
        let r = render(&e, "");
        assert!(r.ends_with(
            "  help: Usage: str replace {flags} <find> <replace> ...(rest) . Use `--help`\n        for more information.\n"
        ), "{r}");
    }

    #[test]
    fn matches_nus_rendering_of_a_plugin_error() {
        // `nu --no-config-file --plugins '[nu_plugin_inc]' -c '[1 2 3] | inc'`, 0.115.1; the
        // label is on the command's head, as the plugin sent it.
        let e = LabeledError::msg("Unable to extract string")
            .label("value cannot be converted to string", Span::new(10, 13));
        assert_eq!(
            render(&e, "[1 2 3] | inc"),
            "Error: nu::shell::error\n\n  x Unable to extract string\n   ,-[source:1:11]\n 1 | [1 2 3] | inc\n   :           ^|^\n   :            `-- value cannot be converted to string\n   `----\n"
        );
    }

    #[test]
    fn a_span_inside_a_character_does_not_panic() {
        let e = LabeledError::msg("m").label("l", Span::new(1, 2));
        assert!(render(&e, "é x").contains("-- l"));
    }

    #[test]
    fn labels_outside_the_source_are_kept() {
        let e = LabeledError::msg("boom").label("here", Span::new(100, 104));
        assert_eq!(
            render(&e, "inc"),
            "Error: nu::shell::error\n\n  x boom\n  label: here\n"
        );
    }
}
