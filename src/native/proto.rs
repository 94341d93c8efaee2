//! The orchestrator <-> worker messages: length-prefixed frames of little-endian words.

use crate::report::{PageKind, Run};
use std::io::{Read, Write};

/// A command to a worker.
#[derive(Debug, PartialEq, Eq)]
pub enum Cmd {
    /// Execute leaf op number N.
    Op(u32),
    /// Report the layout of every live region.
    Layout,
    /// Fault in the worker's own memory (outside any op's counter window).
    Warm,
    /// Exit now, without a reply: the worker of an `exit` op, having replied to it,
    /// waits for this so that the orchestrator can start timing the exit first.
    Exit,
}

impl Cmd {
    pub fn encode(&self) -> Vec<u8> {
        match self {
            Cmd::Op(id) => [&[0u8][..], &id.to_le_bytes()].concat(),
            Cmd::Layout => vec![1],
            Cmd::Warm => vec![2],
            Cmd::Exit => vec![3],
        }
    }
    pub fn decode(b: &[u8]) -> Option<Cmd> {
        match b {
            [0, id @ ..] => Some(Cmd::Op(u32::from_le_bytes(id.try_into().ok()?))),
            [1] => Some(Cmd::Layout),
            [2] => Some(Cmd::Warm),
            [3] => Some(Cmd::Exit),
            _ => None,
        }
    }
}

/// A reply under construction: status byte 0 (ok) or 1 (error, then a message).
pub struct Enc(pub Vec<u8>);

impl Enc {
    pub fn ok() -> Enc {
        Enc(vec![0])
    }
    /// An op done: its minor and major fault counts, for fork the child's pid, the op's
    /// time in nanoseconds (wall time; a fork's is the caller's CPU time), the defects
    /// the runner noticed in its own measurement (strays, lost samples) and the runner
    /// faults the kernel explains, one line each.
    pub fn ok_op(minflt: i64, majflt: i64, pid: i32, ns: u64, diagnostics: &[String], notes: &[String]) -> Vec<u8> {
        let mut e = Enc::ok();
        e.u64(minflt as u64);
        e.u64(majflt as u64);
        e.u64(pid as u64);
        e.u64(ns);
        for lines in [diagnostics, notes] {
            e.u64(lines.len() as u64);
            for l in lines {
                e.text(l);
            }
        }
        e.0
    }
    pub fn err(msg: &str) -> Vec<u8> {
        [&[1u8][..], msg.as_bytes()].concat()
    }
    fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn text(&mut self, s: &str) {
        self.u64(s.len() as u64);
        self.0.extend_from_slice(s.as_bytes());
    }
    /// One region's layout: name, number of runs, then `(first, n, kind)` per run.
    pub fn region(&mut self, name: &str, runs: &[Run]) {
        self.text(name);
        self.u64(runs.len() as u64);
        for r in runs {
            self.u64(r.first);
            self.u64(r.n);
            self.u64(match r.kind {
                PageKind::Order(o) => o as u64,
                PageKind::Zero => KIND_ZERO,
                PageKind::Swap => KIND_SWAP,
            });
        }
    }
}

const KIND_ZERO: u64 = u64::MAX;
const KIND_SWAP: u64 = u64::MAX - 1;

/// What `Enc::ok_op` said.
#[derive(Debug, PartialEq, Eq)]
pub struct OpReply {
    pub minflt: i64,
    pub majflt: i64,
    pub pid: i64,
    pub ns: u64,
    pub diagnostics: Vec<String>,
    pub notes: Vec<String>,
}

/// Reads a reply: `Err(message)` for an error reply.
pub struct Dec<'b>(&'b [u8]);

impl<'b> Dec<'b> {
    pub fn new(b: &'b [u8]) -> Result<Dec<'b>, String> {
        match b {
            [0, rest @ ..] => Ok(Dec(rest)),
            [1, msg @ ..] => Err(String::from_utf8_lossy(msg).into_owned()),
            _ => Err("malformed reply".into()),
        }
    }
    pub fn u64(&mut self) -> Result<u64, String> {
        let (w, rest) = self.0.split_first_chunk::<8>().ok_or("truncated reply")?;
        self.0 = rest;
        Ok(u64::from_le_bytes(*w))
    }
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
    pub fn text(&mut self) -> Result<String, String> {
        let len = self.u64()? as usize;
        let s = self.0.get(..len).ok_or("truncated reply")?;
        let s = String::from_utf8_lossy(s).into_owned();
        self.0 = &self.0[len..];
        Ok(s)
    }
    /// An `ok_op` reply.
    pub fn op(&mut self) -> Result<OpReply, String> {
        let (minflt, majflt) = (self.u64()? as i64, self.u64()? as i64);
        let (pid, ns) = (self.u64()? as i64, self.u64()?);
        let diagnostics = self.lines()?;
        let notes = self.lines()?;
        Ok(OpReply {
            minflt,
            majflt,
            pid,
            ns,
            diagnostics,
            notes,
        })
    }
    fn lines(&mut self) -> Result<Vec<String>, String> {
        let n = self.u64()?;
        (0..n).map(|_| self.text()).collect()
    }
    pub fn region(&mut self) -> Result<(String, Vec<Run>), String> {
        let name = self.text()?;
        let n = self.u64()?;
        let runs = (0..n)
            .map(|_| {
                let (first, n, k) = (self.u64()?, self.u64()?, self.u64()?);
                let kind = match k {
                    KIND_ZERO => PageKind::Zero,
                    KIND_SWAP => PageKind::Swap,
                    o => PageKind::Order(o as u32),
                };
                Ok(Run { first, n, kind })
            })
            .collect::<Result<_, String>>()?;
        Ok((name, runs))
    }
}

pub fn send(w: &mut impl Write, msg: &[u8]) -> std::io::Result<()> {
    w.write_all(&(msg.len() as u32).to_le_bytes())?;
    w.write_all(msg)
}

/// The next frame, or None at end of stream.
pub fn recv(r: &mut impl Read) -> Option<Vec<u8>> {
    let mut len = [0u8; 4];
    r.read_exact(&mut len).ok()?;
    let mut msg = vec![0u8; u32::from_le_bytes(len) as usize];
    r.read_exact(&mut msg).ok()?;
    Some(msg)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips() {
        for c in [Cmd::Op(7), Cmd::Layout, Cmd::Warm, Cmd::Exit] {
            assert_eq!(Cmd::decode(&c.encode()), Some(c));
        }
        let op = Enc::ok_op(
            -3,
            5,
            42,
            1234,
            &["fault at 0x1000".to_string()],
            &["page moved".to_string()],
        );
        let mut d = Dec::new(&op).unwrap();
        let want = OpReply {
            minflt: -3,
            majflt: 5,
            pid: 42,
            ns: 1234,
            diagnostics: vec!["fault at 0x1000".to_string()],
            notes: vec!["page moved".to_string()],
        };
        assert_eq!(d.op().unwrap(), want);
        assert!(d.is_empty());
        assert_eq!(Dec::new(&Enc::err("boom")).err().unwrap(), "boom");
        let runs = vec![
            Run {
                first: 0,
                n: 16,
                kind: PageKind::Order(4),
            },
            Run {
                first: 20,
                n: 1,
                kind: PageKind::Zero,
            },
            Run {
                first: 21,
                n: 2,
                kind: PageKind::Swap,
            },
        ];
        let mut e = Enc::ok();
        e.region("buf", &runs);
        let mut framed = Vec::new();
        send(&mut framed, &e.0).unwrap();
        let msg = recv(&mut &framed[..]).unwrap();
        let mut d = Dec::new(&msg).unwrap();
        assert_eq!(d.region().unwrap(), ("buf".to_string(), runs));
        assert!(d.is_empty());
        assert!(recv(&mut &[1u8, 0][..]).is_none());
    }
}
