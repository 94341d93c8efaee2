//! Syntax of the workload language (../shared/spec/workload.md): lines to a tree of
//! statements, with every per-op check that needs no state (sizes, alignment, knobs).
//! The stateful checks (regions, processes, repeat bodies) are in `check`.

use super::ast::*;
use super::check::{self, Node, Spans};
use crate::hw::Granule;
use crate::mm::thp_sysfs::ThpKnobs;

/// Parses and validates a workload; `path` is only used in messages. A leading UTF-8
/// byte order mark is skipped.
pub fn parse_str(path: &str, src: &str) -> Result<Workload, WorkloadError> {
    let src = src.strip_prefix('\u{feff}').unwrap_or(src);
    let mut parser = Parser {
        path,
        next_index: 0,
        machine: None,
    };
    let nodes = parser.parse(src)?;
    check::check(path, &nodes)?;
    let stmts = prune(nodes.into_iter().map(Node::into_stmt).collect());
    check::bounds(path, &stmts)?;
    Ok(Workload {
        path: path.to_string(),
        text: src.to_string(),
        stmts,
        machine: parser.machine.unwrap_or_default(),
    })
}

/// Drops every `repeat` whose body runs no op: it does nothing, and an executor would
/// still count through its N (up to 2^64) empty iterations.
fn prune(stmts: Vec<Stmt>) -> Vec<Stmt> {
    stmts
        .into_iter()
        .filter_map(|mut s| {
            if let Op::Repeat { body, .. } = &mut s.op {
                *body = prune(std::mem::take(body));
                if body.is_empty() {
                    return None;
                }
            }
            Some(s)
        })
        .collect()
}

/// The largest workload file read: far beyond any real workload, and it bounds what
/// `foliolab run /dev/zero` holds.
pub const MAX_FILE_BYTES: u64 = 16 << 20;

/// Reads, parses and validates a workload file (a pipe or device works too).
pub fn parse_file(path: &str) -> Result<Workload, WorkloadError> {
    let err = |pos, msg| WorkloadError {
        path: path.to_string(),
        pos,
        msg,
    };
    // A file-level error is at its start: line 1, column 1 (0:0 is no position).
    let bytes = crate::input::read_limited(path, MAX_FILE_BYTES).map_err(|msg| err(Pos { line: 1, col: 1 }, msg))?;
    let src = std::str::from_utf8(&bytes).map_err(|e| {
        let valid = &bytes[..e.valid_up_to()];
        let line_start = valid.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
        // Columns count characters, as tokenize does; the prefix is valid UTF-8.
        let col = String::from_utf8_lossy(&valid[line_start..]).chars().count() as u32 + 1;
        let line = valid.iter().filter(|&&b| b == b'\n').count() as u32 + 1;
        err(
            Pos { line, col },
            format!("invalid UTF-8 (byte {:#04x})", bytes[e.valid_up_to()]),
        )
    })?;
    parse_str(path, src)
}

/// The deepest nesting of `repeat` blocks: enough for any workload, and it keeps every
/// recursive walk of the statement tree (checks, executors) far from the stack's end.
pub const MAX_REPEAT_DEPTH: usize = 64;

/// The process ops run in when they have no `@proc`.
pub const MAIN: &str = "main";

/// The highest placement index: slots must end below the x86_64 validation host's user
/// address limit (2^47 less one page, so the last full 64G slot is out).
pub const MAX_MMAP_INDEX: u32 = ((0x8000_0000_0000 - PLACEMENT_BASE) / PLACEMENT_STRIDE) as u32 - 2;

#[derive(Clone, Copy)]
struct Tok<'a> {
    text: &'a str,
    pos: Pos,
}

/// Splits a line into whitespace-separated tokens, dropping a `#` comment.
fn tokenize(line: &str, line_no: u32) -> Vec<Tok<'_>> {
    let code = line.split('#').next().unwrap_or("");
    let mut toks = Vec::new();
    let mut start: Option<(usize, u32)> = None;
    let mut col = 0u32;
    for (i, c) in code.char_indices() {
        col += 1;
        match (c.is_whitespace(), start) {
            (true, Some((s, sc))) => {
                toks.push(Tok {
                    text: &code[s..i],
                    pos: Pos { line: line_no, col: sc },
                });
                start = None;
            }
            (false, None) => start = Some((i, col)),
            _ => {}
        }
    }
    if let Some((s, sc)) = start {
        toks.push(Tok {
            text: &code[s..],
            pos: Pos { line: line_no, col: sc },
        });
    }
    toks
}

pub use crate::input::Echo;

/// `[A-Za-z_][A-Za-z0-9_-]*`, the spec's region and process names.
pub fn valid_name(s: &str) -> bool {
    let mut cs = s.chars();
    matches!(cs.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && cs.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// A decimal size with an optional K/M/G/T suffix (powers of 1024, either case, `B` or
/// `iB` after it allowed), or `0x` hex: one grammar for workloads and the command line.
pub fn parse_size(s: &str) -> Option<u64> {
    if let Some(hex) = s.strip_prefix("0x") {
        return u64::from_str_radix(hex, 16).ok().filter(|_| !hex.starts_with('+'));
    }
    let (t, unit) = match s.strip_suffix("iB") {
        Some(t) => (t, true),
        None => (s.strip_suffix('B').unwrap_or(s), false),
    };
    let (digits, shift) = match t.as_bytes().last()?.to_ascii_uppercase() {
        b'K' => (&t[..t.len() - 1], 10),
        b'M' => (&t[..t.len() - 1], 20),
        b'G' => (&t[..t.len() - 1], 30),
        b'T' => (&t[..t.len() - 1], 40),
        _ if unit => return None,
        _ => (t, 0),
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse::<u64>().ok()?.checked_mul(1 << shift)
}

/// Formats a byte count the way a workload would write it.
pub fn fmt_size(v: u64) -> String {
    for (suffix, shift) in [("T", 40), ("G", 30), ("M", 20), ("K", 10)] {
        if v != 0 && v.is_multiple_of(1 << shift) {
            return format!("{}{suffix}", v >> shift);
        }
    }
    v.to_string()
}

/// One statement in the making: a line's op, or the start/end of a repeat block.
enum Line {
    Op(Node),
    /// A `machine` line, kept by the parser rather than run.
    Machine,
    Repeat {
        n: u64,
        pos: Pos,
    },
    End,
}

struct Parser<'p> {
    path: &'p str,
    /// The static index of the next mmap op (its placement slot).
    next_index: u32,
    /// The `machine` line's needs, once one is seen.
    machine: Option<Vec<MachineNeed>>,
}

/// The ops of the language, for "did you mean" on an unknown one (with `khugepaged`,
/// which would make rustfmt lay this list out one per line).
const OPS: &[&str] = &[
    "set", "mmap", "touch", "madvise", "munmap", "mprotect", "mremap", "mlock", "munlock", "fork", "exit", "thread",
    "threads", "cpu", "shrink", "swapon", "memlimit", "migrate", "mark", "repeat", "end", "machine",
];

/// The tokens of one line after the op keyword.
struct Args<'a, 't> {
    toks: &'t [Tok<'a>],
    i: usize,
    /// Where a missing argument is reported: the op keyword.
    op: Tok<'a>,
}

impl<'a> Args<'a, '_> {
    fn peek(&self) -> Option<Tok<'a>> {
        self.toks.get(self.i).copied()
    }
    fn next(&mut self) -> Option<Tok<'a>> {
        let t = self.peek();
        self.i += t.is_some() as usize;
        t
    }
}

impl Parser<'_> {
    /// `machine KEY=VALUE...`: the least `nodes`, `cpus` and `ram` the workload needs,
    /// each value checked as `--set` checks it; one such line per workload.
    fn machine(&mut self, op: Tok, a: &mut Args<'_, '_>) -> Result<Line, WorkloadError> {
        if self.machine.is_some() {
            return Err(self.err(op.pos, "a second 'machine' line"));
        }
        let mut needs: Vec<MachineNeed> = Vec::new();
        while let Some(t) = a.next() {
            let Some((k, v)) = t.text.split_once('=') else {
                return Err(self.err(t.pos, format!("expected KEY=VALUE, not '{}'", Echo(t.text))));
            };
            let Some(key) = ["nodes", "cpus", "ram"].into_iter().find(|&n| n == k) else {
                let hint = crate::suggest::hint(k, ["nodes", "cpus", "ram"]);
                return Err(self.err(
                    t.pos,
                    format!("unknown machine key '{}'{hint} (nodes, cpus, ram)", Echo(k)),
                ));
            };
            if needs.iter().any(|n| n.key == key) {
                return Err(self.err(t.pos, format!("'{key}' given twice")));
            }
            crate::sim::Variants::default()
                .set(key, v)
                .map_err(|e| self.err(t.pos, Echo(&e).to_string()))?;
            needs.push(MachineNeed {
                key,
                value: v.to_string(),
                pos: t.pos,
            });
        }
        if needs.is_empty() {
            return Err(self.err(op.pos, "expected KEY=VALUE after 'machine' (nodes, cpus, ram)"));
        }
        self.machine = Some(needs);
        Ok(Line::Machine)
    }

    fn err(&self, pos: Pos, msg: impl Into<String>) -> WorkloadError {
        WorkloadError {
            path: self.path.to_string(),
            pos,
            msg: msg.into(),
        }
    }

    fn parse(&mut self, src: &str) -> Result<Vec<Node>, WorkloadError> {
        // Open repeat blocks: (count, position of `repeat`, body so far).
        let mut stack: Vec<(u64, Pos, Vec<Node>)> = Vec::new();
        let mut top = Vec::new();
        for (i, line) in src.lines().enumerate() {
            let toks = tokenize(line, i as u32 + 1);
            if toks.is_empty() {
                continue;
            }
            let body = stack.last_mut().map_or(&mut top, |(_, _, b)| b);
            match self.line(&toks)? {
                Line::Op(node) => body.push(node),
                Line::Machine if !stack.is_empty() => {
                    return Err(self.err(toks[0].pos, "'machine' cannot be inside a repeat"));
                }
                Line::Machine => {}
                Line::Repeat { n, pos } => {
                    if stack.len() == MAX_REPEAT_DEPTH {
                        return Err(self.err(pos, format!("repeat nested more than {MAX_REPEAT_DEPTH} deep")));
                    }
                    stack.push((n, pos, Vec::new()))
                }
                Line::End => {
                    let (n, pos, body) = stack
                        .pop()
                        .ok_or_else(|| self.err(toks[0].pos, "'end' without 'repeat'"))?;
                    let stmt = Stmt {
                        pos,
                        proc_name: MAIN.to_string(),
                        op: Op::Repeat { n, body: Vec::new() },
                    };
                    let parent = stack.last_mut().map_or(&mut top, |(_, _, b)| b);
                    parent.push(Node {
                        stmt,
                        at: Spans::default(),
                        body,
                    });
                }
            }
        }
        match stack.pop() {
            Some((_, pos, _)) => Err(self.err(pos, "'repeat' without a matching 'end'")),
            None => Ok(top),
        }
    }

    fn line<'a>(&mut self, toks: &[Tok<'a>]) -> Result<Line, WorkloadError> {
        let (proc_tok, rest) = match toks[0].text.strip_prefix('@') {
            Some(name) => {
                if !valid_name(name) {
                    return Err(self.err(toks[0].pos, format!("invalid process name '{}'", Echo(name))));
                }
                (Some((name, toks[0].pos)), &toks[1..])
            }
            None => (None, toks),
        };
        let Some(&op) = rest.first() else {
            return Err(self.err(toks[0].pos, "expected an op after the process name"));
        };
        let mut a = Args { toks: rest, i: 1, op };
        if let (Some((_, pos)), "repeat" | "end" | "machine") = (proc_tok, op.text) {
            return Err(self.err(
                pos,
                format!("'{}' cannot take a process; put @proc on the ops inside", op.text),
            ));
        }
        let mut at = Spans {
            proc: proc_tok.map(|(_, p)| p),
            ..Spans::default()
        };
        let op_ast = match op.text {
            "repeat" => {
                let t = self.arg(&mut a, "a repeat count")?;
                let n = t
                    .text
                    .parse::<u64>()
                    .map_err(|_| self.err(t.pos, format!("invalid repeat count '{}'", Echo(t.text))))?;
                if n == 0 {
                    return Err(self.err(t.pos, "repeat count must be at least 1"));
                }
                self.finish(&a)?;
                return Ok(Line::Repeat { n, pos: op.pos });
            }
            "end" => {
                self.finish(&a)?;
                return Ok(Line::End);
            }
            "machine" => return self.machine(op, &mut a),
            "set" => {
                let knob = self.arg(&mut a, "a knob")?;
                let value = self.arg(&mut a, "a value")?;
                let mut scratch = ThpKnobs::new(Granule::K4);
                if let Err(e) = scratch.set(knob.text, value.text) {
                    let e = [knob.text, value.text]
                        .iter()
                        .fold(e, |e, t| e.replace(t, &Echo(t).to_string()));
                    let pos = if e.starts_with("unknown knob") {
                        knob.pos
                    } else {
                        value.pos
                    };
                    return Err(self.err(pos, e));
                }
                Op::Set {
                    knob: knob.text.to_string(),
                    value: value.text.to_string(),
                }
            }
            "mmap" => self.mmap(&mut a, &mut at)?,
            "touch" => {
                let region = self.region(&mut a, &mut at)?;
                let range = self.opt_range(&mut a, &mut at)?;
                let (mut write, mut stride) = (None, None);
                while let Some(t) = a.next() {
                    match t.text {
                        "read" | "write" if write.is_none() => write = Some(t.text == "write"),
                        _ if t.text.starts_with("stride=") && stride.is_none() => {
                            let s = self.size(t, &t.text[7..], "stride")?;
                            if s == 0 {
                                return Err(self.err(t.pos, "stride must not be zero"));
                            }
                            stride = Some(s);
                        }
                        _ => {
                            return Err(self.err(
                                t.pos,
                                format!("unexpected '{}' (expected read, write or stride=S)", Echo(t.text)),
                            ))
                        }
                    }
                }
                Op::Touch {
                    region,
                    range,
                    write: write.unwrap_or(true),
                    stride: stride.unwrap_or(UNIT),
                }
            }
            "madvise" => {
                let region = self.region(&mut a, &mut at)?;
                let range = self.range(&mut a, &mut at)?;
                let t = self.arg(&mut a, "an advice")?;
                let advice = match t.text {
                    "dontneed" => Advice::DontNeed,
                    "free" => Advice::Free,
                    "pageout" => Advice::PageOut,
                    "cold" => Advice::Cold,
                    "hugepage" => Advice::HugePage,
                    "nohugepage" => Advice::NoHugePage,
                    "collapse" => Advice::Collapse,
                    _ => return Err(self.err(t.pos, format!("unknown advice '{}' (expected dontneed, free, pageout, cold, hugepage, nohugepage or collapse)", Echo(t.text)))),
                };
                let mut step = None;
                if let Some(t) = a.peek() {
                    if let Some(v) = t.text.strip_prefix("step=") {
                        a.next();
                        let st = self.size(t, v, "step")?;
                        if st == 0 || st % UNIT != 0 || range.len % st != 0 {
                            return Err(self.err(
                                t.pos,
                                format!(
                                    "step must be a non-zero multiple of 4K dividing the length {}",
                                    range.len
                                ),
                            ));
                        }
                        step = Some(st);
                    }
                }
                self.finish(&a)?;
                Op::Madvise {
                    region,
                    range,
                    advice,
                    step,
                }
            }
            "mprotect" => {
                let region = self.region(&mut a, &mut at)?;
                let range = self.range(&mut a, &mut at)?;
                let t = self.arg(&mut a, "a protection")?;
                let prot = match t.text {
                    "none" => Prot::None,
                    "r" => Prot::R,
                    "rw" => Prot::Rw,
                    _ => {
                        return Err(self.err(
                            t.pos,
                            format!("unknown protection '{}' (expected none, r or rw)", Echo(t.text)),
                        ))
                    }
                };
                self.finish(&a)?;
                Op::Mprotect { region, range, prot }
            }
            "mremap" => {
                let region = self.region(&mut a, &mut at)?;
                let t = self.arg(&mut a, "a new size")?;
                let size = self.region_size(t)?;
                let moves = match a.next() {
                    None => false,
                    Some(t) if t.text == "move" => true,
                    Some(t) => return Err(self.err(t.pos, format!("unexpected '{}' (expected move)", Echo(t.text)))),
                };
                self.finish(&a)?;
                at.size = Some(t.pos);
                Op::Mremap { region, size, moves }
            }
            "munmap" | "mlock" | "munlock" => {
                let region = self.region(&mut a, &mut at)?;
                let range = self.opt_range(&mut a, &mut at)?;
                self.finish(&a)?;
                match op.text {
                    "munmap" => Op::Munmap { region, range },
                    "mlock" => Op::Mlock { region, range },
                    _ => Op::Munlock { region, range },
                }
            }
            "fork" => {
                let t = self.arg(&mut a, "a child process name")?;
                if !valid_name(t.text) {
                    return Err(self.err(t.pos, format!("invalid process name '{}'", Echo(t.text))));
                }
                at.name = t.pos;
                self.finish(&a)?;
                Op::Fork {
                    child: t.text.to_string(),
                }
            }
            "exit" => {
                self.finish(&a)?;
                Op::Exit
            }
            "thread" => {
                let t = self.arg(&mut a, "a thread name")?;
                if !valid_name(t.text) {
                    return Err(self.err(t.pos, format!("invalid thread name '{}'", Echo(t.text))));
                }
                at.name = t.pos;
                self.finish(&a)?;
                Op::Thread {
                    name: t.text.to_string(),
                }
            }
            "threads" => {
                let t = self.arg(&mut a, "'all'")?;
                if t.text != "all" {
                    return Err(self.err(t.pos, format!("unexpected '{}' (expected 'all')", Echo(t.text))));
                }
                self.finish(&a)?;
                Op::ThreadsAll
            }
            "cpu" => {
                let t = self.arg(&mut a, "a CPU number")?;
                let cpu = t
                    .text
                    .parse::<u32>()
                    .ok()
                    .filter(|&c| (c as usize) < crate::cpumask::NR_CPUS)
                    .ok_or_else(|| {
                        self.err(
                            t.pos,
                            format!("invalid CPU '{}' (0 to {})", Echo(t.text), crate::cpumask::NR_CPUS - 1),
                        )
                    })?;
                self.finish(&a)?;
                Op::Cpu { cpu }
            }
            "shrink" => {
                self.finish(&a)?;
                Op::Shrink
            }
            "khugepaged" => {
                self.finish(&a)?;
                Op::Khugepaged
            }
            "swapon" => {
                let t = self.arg(&mut a, "a swap device size")?;
                let size = self.size(t, t.text, "swap device size")?;
                self.finish(&a)?;
                Op::Swapon { size }
            }
            "memlimit" => {
                let t = self.arg(&mut a, "a memory limit")?;
                let size = self.size(t, t.text, "memory limit")?;
                self.finish(&a)?;
                Op::Memlimit { size }
            }
            "migrate" => {
                let region = self.region(&mut a, &mut at)?;
                let range = self.opt_range(&mut a, &mut at)?;
                let t = self.arg(&mut a, "node=N")?;
                let node = t
                    .text
                    .strip_prefix("node=")
                    .and_then(|v| v.parse::<usize>().ok().filter(|n| *n < 64));
                let Some(node) = node else {
                    return Err(self.err(
                        t.pos,
                        format!(
                            "expected node=N with N a NUMA node from 0 to 63, not '{}'",
                            Echo(t.text)
                        ),
                    ));
                };
                self.finish(&a)?;
                Op::Migrate {
                    region,
                    range,
                    node,
                    node_pos: t.pos,
                }
            }
            "mark" => {
                let t = self.arg(&mut a, "a label")?;
                self.finish(&a)?;
                Op::Mark {
                    label: t.text.to_string(),
                }
            }
            other => {
                let hint = crate::suggest::hint(other, OPS.iter().copied().chain(["khugepaged"]));
                return Err(self.err(op.pos, format!("unknown op '{}'{hint}", Echo(other))));
            }
        };
        let proc_name = proc_tok.map_or(MAIN, |(n, _)| n).to_string();
        Ok(Line::Op(Node {
            stmt: Stmt {
                pos: op.pos,
                proc_name,
                op: op_ast,
            },
            at,
            body: Vec::new(),
        }))
    }

    fn mmap(&mut self, a: &mut Args, at: &mut Spans) -> Result<Op, WorkloadError> {
        let region = self.region(a, at)?;
        let t = self.arg(a, "a size")?;
        let size = self.region_size(t)?;
        let (mut skew, mut flags) = (None, [None::<Pos>; 6]);
        const FLAGS: [&str; 6] = ["hugepage", "nohugepage", "populate", "ro", "shared", "secret"];
        while let Some(t) = a.next() {
            if let Some(v) = t.text.strip_prefix("skew=") {
                let s = self.size(t, v, "skew")?;
                if skew.is_some() {
                    return Err(self.err(t.pos, "skew given twice"));
                }
                if s % UNIT != 0 {
                    return Err(self.err(t.pos, format!("skew {} is not a multiple of 4K", Echo(v))));
                }
                if s + size > PLACEMENT_STRIDE {
                    return Err(self.err(
                        t.pos,
                        format!("skew {} pushes the region out of its 64G placement slot", Echo(v)),
                    ));
                }
                skew = Some(s);
                continue;
            }
            let Some(f) = FLAGS.iter().position(|f| *f == t.text) else {
                return Err(self.err(
                    t.pos,
                    format!(
                        "unexpected '{}' (expected skew=S, hugepage, nohugepage, populate, ro, shared or secret)",
                        Echo(t.text)
                    ),
                ));
            };
            if flags[f].is_some() {
                return Err(self.err(t.pos, format!("'{}' given twice", Echo(t.text))));
            }
            flags[f] = Some(t.pos);
        }
        if let (Some(_), Some(p)) = (flags[0], flags[1]) {
            return Err(self.err(p, "'hugepage' and 'nohugepage' conflict"));
        }
        // A secretmem mapping is shared by nature; its faults are secretmem_fault's alone.
        if let Some(p) = flags[5] {
            if let Some(other) = (0..5).find(|&i| flags[i].is_some()) {
                let q = flags[other].unwrap();
                let at = if (q.line, q.col) > (p.line, p.col) { q } else { p };
                return Err(self.err(at, format!("'secret' and '{}' conflict", FLAGS[other])));
            }
        }
        let index = self.next_index;
        if index > MAX_MMAP_INDEX {
            return Err(self.err(
                a.op.pos,
                format!(
                    "more than {} mmap ops: placement would leave the user address space",
                    MAX_MMAP_INDEX + 1
                ),
            ));
        }
        self.next_index += 1;
        let skew = skew.unwrap_or(0);
        let [hugepage, nohugepage, populate, ro, shared, secret] = flags.map(|f| f.is_some());
        let addr = PLACEMENT_BASE + index as u64 * PLACEMENT_STRIDE + skew;
        Ok(Op::Mmap {
            region,
            size,
            skew,
            hugepage,
            nohugepage,
            populate,
            ro,
            shared,
            secret,
            index,
            addr,
        })
    }

    /// A region's size (`mmap`, `mremap`): a non-zero multiple of 4K, at most 32G.
    fn region_size(&self, t: Tok) -> Result<u64, WorkloadError> {
        let size = self.size(t, t.text, "size")?;
        if size == 0 || size % UNIT != 0 {
            return Err(self.err(
                t.pos,
                format!("region size {} is not a non-zero multiple of 4K", Echo(t.text)),
            ));
        }
        if size > MAX_REGION {
            return Err(self.err(t.pos, format!("region size {} is above the 32G limit", Echo(t.text))));
        }
        Ok(size)
    }

    fn arg<'a>(&self, a: &mut Args<'a, '_>, what: &str) -> Result<Tok<'a>, WorkloadError> {
        let op = a.op;
        let end = a.toks.last().map_or(op.pos, |t| Pos {
            line: t.pos.line,
            col: t.pos.col + t.text.chars().count() as u32,
        });
        a.next()
            .ok_or_else(|| self.err(end, format!("'{}' expects {what}", op.text)))
    }

    fn finish(&self, a: &Args) -> Result<(), WorkloadError> {
        match a.peek() {
            Some(t) => Err(self.err(t.pos, format!("unexpected '{}' after '{}'", Echo(t.text), a.op.text))),
            None => Ok(()),
        }
    }

    fn size(&self, t: Tok, text: &str, what: &str) -> Result<u64, WorkloadError> {
        parse_size(text).ok_or_else(|| {
            self.err(
                t.pos,
                format!("invalid {what} '{}' (expected e.g. 64K, 2M or 0x10000)", Echo(text)),
            )
        })
    }

    fn region(&self, a: &mut Args, at: &mut Spans) -> Result<String, WorkloadError> {
        let t = self.arg(a, "a region name")?;
        if !valid_name(t.text) {
            return Err(self.err(t.pos, format!("invalid region name '{}'", Echo(t.text))));
        }
        at.name = t.pos;
        Ok(t.text.to_string())
    }

    /// `OFF LEN`, both 4K-aligned, LEN non-zero.
    fn range(&self, a: &mut Args, at: &mut Spans) -> Result<Range, WorkloadError> {
        let off_t = self.arg(a, "an offset and a length")?;
        let off = self.size(off_t, off_t.text, "offset")?;
        let len_t = self.arg(a, "a length")?;
        let len = self.size(len_t, len_t.text, "length")?;
        if off % UNIT != 0 {
            return Err(self.err(off_t.pos, format!("offset {} is not a multiple of 4K", off_t.text)));
        }
        if len == 0 || len % UNIT != 0 {
            return Err(self.err(
                len_t.pos,
                format!("length {} is not a non-zero multiple of 4K", len_t.text),
            ));
        }
        at.range = Some(off_t.pos);
        Ok(Range { off, len })
    }

    /// A range if the next token looks like a number.
    fn opt_range(&self, a: &mut Args, at: &mut Spans) -> Result<Option<Range>, WorkloadError> {
        match a.peek() {
            Some(t) if t.text.starts_with(|c: char| c.is_ascii_digit()) => self.range(a, at).map(Some),
            _ => Ok(None),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(src: &str) -> Workload {
        parse_str("t.wl", src).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Asserts `src` fails at `line:col` with a message containing `msg`.
    #[track_caller]
    fn fails(src: &str, line: u32, col: u32, msg: &str) {
        let e = parse_str("t.wl", src).expect_err("should fail");
        assert_eq!((e.pos.line, e.pos.col), (line, col), "{e}");
        assert!(e.msg.contains(msg), "'{e}' lacks '{msg}'");
        assert!(e.to_string().starts_with(&format!("t.wl:{line}:{col}: ")));
    }

    #[test]
    fn a_machine_line_states_what_the_workload_needs() {
        let w = parse_str("t.wl", "machine nodes=2 ram=4G\nmmap a 4K\n").unwrap();
        let needs: Vec<_> = w.machine.iter().map(|n| (n.key, n.value.as_str(), n.pos.col)).collect();
        assert_eq!(needs, [("nodes", "2", 9), ("ram", "4G", 17)]);
        assert!(parse_str("t.wl", "mmap a 4K\n").unwrap().machine.is_empty());
    }

    #[test]
    fn a_bad_machine_line_is_an_error_at_its_word() {
        fails(
            "machine nodez=2",
            1,
            9,
            "unknown machine key 'nodez' (did you mean 'nodes'?)",
        );
        fails("machine nodes=0", 1, 9, "invalid value '0' for variant 'nodes'");
        fails("machine", 1, 1, "expected KEY=VALUE");
        fails("machine nodes=2 nodes=3", 1, 17, "'nodes' given twice");
        fails("machine cpus=2\nmachine ram=1G", 2, 1, "a second 'machine' line");
        fails("repeat 2\nmachine cpus=2\nend", 2, 1, "inside a repeat");
        fails("@p machine cpus=2", 1, 1, "cannot take a process");
    }

    #[test]
    fn an_unknown_op_names_the_nearest() {
        fails("mmapp a 4K", 1, 1, "unknown op 'mmapp' (did you mean 'mmap'?)");
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4096"), Some(4096));
        assert_eq!(parse_size("64K"), Some(65536));
        assert_eq!(parse_size("2M"), Some(2 << 20));
        assert_eq!(parse_size("1G"), Some(1 << 30));
        assert_eq!(parse_size("1T"), Some(1 << 40));
        assert_eq!(parse_size("0x3000"), Some(0x3000));
        // The command line's spellings too: one grammar everywhere.
        assert_eq!(parse_size("32m"), Some(32 << 20));
        assert_eq!(parse_size("4KB"), Some(4096));
        assert_eq!(parse_size("16MiB"), Some(16 << 20));
        assert_eq!(parse_size("4096B"), Some(4096));
        for bad in [
            "",
            "K",
            "0x",
            "1.5M",
            "-4K",
            "+4096",
            "0x+1",
            "99999999999T",
            "16iB",
            "iB",
            "B",
        ] {
            assert_eq!(parse_size(bad), None, "{bad}");
        }
        assert_eq!(fmt_size(3 << 20), "3M");
        assert_eq!(fmt_size(0x5000), "20K");
        assert_eq!(fmt_size(100), "100");
    }

    #[test]
    fn names() {
        for ok in ["a", "_x", "buf-2", "A_b-c9"] {
            assert!(valid_name(ok), "{ok}");
        }
        for bad in ["", "9a", "-a", "a.b", "a/b", "é"] {
            assert!(!valid_name(bad), "{bad}");
        }
    }

    #[test]
    fn every_op_parses() {
        let w = parse(
            "# a comment\n\
             set enabled always   # trailing comment\n\
             set hugepages-64kB/enabled inherit\n\
             mmap a 64M skew=4K hugepage populate\n\
             mmap b 0x200000 nohugepage ro\n\
             \n\
             mark fault\n\
             touch a\n\
             touch a 64K 128K read stride=16K\n\
             touch b 0 4K read\n\
             madvise a 0 64K dontneed\n\
             mprotect a 0 4K r\n\
             mlock a 2M 2M\n\
             munlock a\n\
             fork child\n\
             @child touch a 4M 4K\n\
             @child exit\n\
             repeat 3\n\
             \trepeat 2\n\
             \t\ttouch a 8M 4K\n\
             \tend\n\
             end\n\
             munmap a 8M 4K\n\
             munmap b\n\
             shrink\n",
        );
        let ops: Vec<_> = w.stmts.iter().map(|s| s.op.keyword()).collect();
        assert_eq!(
            ops,
            [
                "set", "set", "mmap", "mmap", "mark", "touch", "touch", "touch", "madvise", "mprotect", "mlock",
                "munlock", "fork", "touch", "exit", "repeat", "munmap", "munmap", "shrink"
            ]
        );
        assert_eq!(
            w.stmts[2].op,
            Op::Mmap {
                region: "a".into(),
                size: 64 << 20,
                skew: 4096,
                hugepage: true,
                nohugepage: false,
                populate: true,
                ro: false,
                shared: false,
                secret: false,
                index: 0,
                addr: 0x1000_0000_1000
            }
        );
        assert!(matches!(
            w.stmts[3].op,
            Op::Mmap {
                index: 1,
                addr: 0x1010_0000_0000,
                ro: true,
                nohugepage: true,
                ..
            }
        ));
        assert_eq!(
            w.stmts[5].op,
            Op::Touch {
                region: "a".into(),
                range: None,
                write: true,
                stride: 4096
            }
        );
        assert_eq!(
            w.stmts[6].op,
            Op::Touch {
                region: "a".into(),
                range: Some(Range {
                    off: 64 << 10,
                    len: 128 << 10
                }),
                write: false,
                stride: 16384
            }
        );
        assert_eq!(w.stmts[13].proc_name, "child");
        assert_eq!(w.stmts[13].pos, Pos { line: 16, col: 8 });
        let Op::Repeat { n: 3, body } = &w.stmts[15].op else {
            panic!()
        };
        let Op::Repeat { n: 2, body: inner } = &body[0].op else {
            panic!()
        };
        assert_eq!(inner[0].pos, Pos { line: 20, col: 3 });
    }

    #[test]
    fn placement_counts_mmaps_in_file_order_across_processes() {
        let w = parse("fork c\n@c mmap x 4K\nmmap y 4K skew=8K\nrepeat 2\n  mmap z 4K\n  munmap z\nend\nmmap w 4K\n");
        let addrs: Vec<u64> = all_mmaps(&w.stmts);
        assert_eq!(
            addrs,
            [0x1000_0000_0000, 0x1010_0000_2000, 0x1020_0000_0000, 0x1030_0000_0000]
        );
    }

    fn all_mmaps(stmts: &[Stmt]) -> Vec<u64> {
        stmts
            .iter()
            .flat_map(|s| match &s.op {
                Op::Mmap { addr, .. } => vec![*addr],
                Op::Repeat { body, .. } => all_mmaps(body),
                _ => vec![],
            })
            .collect()
    }

    #[test]
    fn migrate_takes_a_region_an_optional_range_and_a_node() {
        let w = parse("mmap a 64K\nmigrate a node=1\nmigrate a 16K 32K node=0\n");
        assert_eq!(
            w.stmts[1].op,
            Op::Migrate {
                region: "a".into(),
                range: None,
                node: 1,
                node_pos: Pos { line: 2, col: 11 },
            }
        );
        let Op::Migrate { range, node, .. } = &w.stmts[2].op else {
            panic!("not a migrate: {:?}", w.stmts[2].op);
        };
        assert_eq!((range.map(|r| (r.off, r.len)), *node), (Some((16 << 10, 32 << 10)), 0));
        assert_eq!(w.migrate_beyond(2), None);
        assert_eq!(w.migrate_beyond(1), Some((Pos { line: 2, col: 11 }, 1)));
        fails("mmap a 64K\nmigrate a", 2, 10, "'migrate' expects node=N");
        fails("mmap a 64K\nmigrate a node=x", 2, 11, "expected node=N");
        fails("mmap a 64K\nmigrate a node=64", 2, 11, "from 0 to 63");
        fails("mmap a 64K\nmigrate a 0 4K node=1 now", 2, 23, "unexpected 'now'");
        fails("mmap a 64K\nmigrate b node=1", 2, 9, "region 'b'");
    }

    #[test]
    fn syntax_errors_name_the_token() {
        fails("frob a", 1, 1, "unknown op 'frob'");
        fails("shrink now", 1, 8, "unexpected 'now'");
        fails("\n  @c touch a", 2, 3, "unknown process 'c'");
        fails("@9c touch a", 1, 1, "invalid process name '9c'");
        fails("@main", 1, 1, "expected an op");
        fails("set frob 1", 1, 5, "unknown knob 'frob'");
        fails("set enabled sometimes", 1, 13, "invalid value 'sometimes'");
        fails("set hugepages-8kB/enabled always", 1, 5, "unknown knob");
        fails("set enabled", 1, 12, "'set' expects a value");
        fails("mmap a", 1, 7, "'mmap' expects a size");
        fails("mmap a 6K", 1, 8, "not a non-zero multiple of 4K");
        fails("mmap a 0", 1, 8, "not a non-zero multiple of 4K");
        fails("mmap a 33G", 1, 8, "32G limit");
        fails("mmap a 2Q", 1, 8, "invalid size '2Q'");
        fails("mmap a 4K skew=100", 1, 11, "skew 100 is not a multiple of 4K");
        fails("mmap a 32G skew=33G", 1, 12, "placement slot");
        fails("mmap a 4K hugepage nohugepage", 1, 20, "conflict");
        fails("mmap a 4K ro ro", 1, 14, "given twice");
        fails("mmap a 4K huge", 1, 11, "unexpected 'huge'");
        fails("mmap 1a 4K", 1, 6, "invalid region name '1a'");
        fails("mmap a 8K\ntouch a 0 4K write read", 2, 20, "unexpected 'read'");
        fails("mmap a 8K\ntouch a 0 4K stride=0", 2, 14, "stride must not be zero");
        fails(
            "mmap a 64K\nmadvise a 0 64K dontneed step=24K",
            2,
            26,
            "step must be a non-zero multiple of 4K dividing the length",
        );
        fails(
            "mmap a 64K\nmadvise a 0 64K dontneed step=0",
            2,
            26,
            "step must be a non-zero multiple",
        );
        fails("mmap a 8K\ntouch a 0", 2, 10, "expects a length");
        fails("mmap a 8K\ntouch a 2K 4K", 2, 9, "offset 2K is not a multiple of 4K");
        fails("mmap a 8K\ntouch a 0 0", 2, 11, "length 0 is not a non-zero multiple");
        fails("mmap a 8K\nmadvise a 0 4K forget", 2, 16, "unknown advice 'forget'");
        fails("mmap a 8K\nmadvise a 0 4K", 2, 15, "expects an advice");
        fails("mmap a 8K\nmprotect a 0 4K rx", 2, 17, "unknown protection 'rx'");
        fails("mmap a 8K\nmunmap a 0 4K x", 2, 15, "unexpected 'x' after 'munmap'");
        fails("fork 2c", 1, 6, "invalid process name");
        fails("exit now", 1, 6, "unexpected 'now'");
        fails("mark", 1, 5, "expects a label");
    }

    #[test]
    fn block_errors() {
        fails("mmap a 4K\nrepeat 2\n  touch a\n", 2, 1, "without a matching 'end'");
        fails("repeat 2\nrepeat 3\nend\n", 1, 1, "without a matching 'end'");
        fails("mmap a 4K\n  end\n", 2, 3, "'end' without 'repeat'");
        fails("repeat 0\nend", 1, 8, "at least 1");
        fails("repeat x\nend", 1, 8, "invalid repeat count");
        fails("repeat\nend", 1, 7, "expects a repeat count");
        fails("fork c\n@c repeat 2\nend", 2, 1, "cannot take a process");
        fails("repeat 2\nend 2", 2, 5, "unexpected '2'");
        let nest = |depth| "repeat 1\n".repeat(depth) + "shrink\n" + &"end\n".repeat(depth);
        parse(&nest(MAX_REPEAT_DEPTH));
        fails(&nest(8000), 65, 1, "repeat nested more than 64 deep");
    }

    #[test]
    fn a_leading_byte_order_mark_is_skipped() {
        assert_eq!(parse("\u{feff}mmap a 4K\n").stmts.len(), 1);
        fails("mmap a 4K\n\u{feff}touch a", 2, 1, "unknown op");
    }

    #[test]
    fn long_tokens_are_echoed_cut() {
        let long = "x".repeat(1 << 20);
        let e = parse_str("t.wl", &format!("mmap a {long}")).unwrap_err();
        assert_eq!(
            e.msg,
            format!(
                "invalid size '{}… (1048576 bytes)' (expected e.g. 64K, 2M or 0x10000)",
                &long[..40]
            )
        );
        let e = parse_str("t.wl", &format!("set enabled {long}")).unwrap_err();
        assert!(e.msg.len() < 200, "{}", e.msg);
        assert_eq!(
            Echo("é".repeat(41).as_str()).to_string(),
            "é".repeat(40) + "… (82 bytes)"
        );
    }

    #[test]
    fn too_many_mmaps() {
        let src: String = (0..=MAX_MMAP_INDEX + 1).map(|i| format!("mmap r{i} 4K\n")).collect();
        fails(&src, MAX_MMAP_INDEX + 2, 1, "more than 1791 mmap ops");
        let ok: String = (0..=MAX_MMAP_INDEX).map(|i| format!("mmap r{i} 4K\n")).collect();
        parse(&ok);
    }

    #[test]
    fn file_errors_name_the_file() {
        let e = parse_file("/nonexistent/x.wl").unwrap_err();
        assert!(e.to_string().starts_with("/nonexistent/x.wl:1:1: cannot read"), "{e}");
    }

    #[test]
    fn threads_share_their_process_and_end_alone_or_with_it() {
        parse("mmap a 4K\nthread t\n@t touch a\n@t exit\nthread t\n@t cpu 3\nthreads all\nexit\n");
        fails("thread t\nthread t\n", 2, 8, "thread 't' already exists");
        fails("fork c\nthread c\n", 2, 8, "process 'c' already exists");
        fails("thread t\n@t exit\n@t touch a\n", 3, 1, "thread 't' exited at line 2");
        fails("thread t\nexit\n@t cpu 1\n", 3, 1, "thread 't' exited at line 2");
        fails("threads some\n", 1, 9, "expected 'all'");
        fails("cpu 256\n", 1, 5, "invalid CPU '256'");
        fails("thread 9t\n", 1, 8, "invalid thread name");
    }
}
