//! The parts of one object sent together (S3's multipart uploads, Azure's blocks): each part on a
//! thread of its own, at most `limit` at once, the next starting as soon as any ends (whichever
//! ends first frees its slot, not the oldest); outcomes gathered by the part's index, so the
//! object is completed with its parts in order; the buffers of ended parts handed back for the
//! next ones, so a writer holds at most `limit + 1` parts of memory (those in flight, and the one
//! filling).

use std::io;
use std::sync::mpsc;

/// What a part's thread tells: the part's index, its outcome, and its buffer back.
type Ended<T> = (usize, io::Result<T>, Vec<u8>);

pub(crate) struct PartsInFlight<T> {
    limit: usize,
    /// Parts handed to threads so far.
    sent: usize,
    /// Parts being sent.
    in_flight: usize,
    ended: mpsc::Receiver<Ended<T>>,
    tell: mpsc::Sender<Ended<T>>,
    /// The outcomes of the parts that ended, by index.
    done: Vec<Option<T>>,
    /// Buffers of ended parts, for the next ones.
    spare: Vec<Vec<u8>>,
}

impl<T: Send + 'static> PartsInFlight<T> {
    /// At most `limit` parts in flight (at least 1).
    pub fn new(limit: usize) -> PartsInFlight<T> {
        let (tell, ended) = mpsc::channel();
        PartsInFlight {
            limit: limit.max(1),
            sent: 0,
            in_flight: 0,
            ended,
            tell,
            done: Vec::new(),
            spare: Vec::new(),
        }
    }

    /// Parts handed to threads so far: the next part's index.
    pub fn sent(&self) -> usize {
        self.sent
    }

    /// A buffer for the next part: one an ended part handed back, or a new one.
    pub fn buffer(&mut self, capacity: usize) -> Vec<u8> {
        self.spare
            .pop()
            .unwrap_or_else(|| Vec::with_capacity(capacity))
    }

    /// Sends `body` as the next part: `send(index, bytes)` on a thread of its own, once fewer
    /// than `limit` parts are in flight. The failure of a part that ended meanwhile is returned
    /// here, and the part is not sent.
    pub fn send(
        &mut self,
        body: Vec<u8>,
        send: impl FnOnce(usize, &[u8]) -> io::Result<T> + Send + 'static,
    ) -> io::Result<()> {
        while self.in_flight >= self.limit {
            self.collect_one()?;
        }
        let index = self.sent;
        let tell = self.tell.clone();
        std::thread::Builder::new()
            .name("part-upload".into())
            .spawn(move || {
                let sent =
                    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| send(index, &body)))
                        .unwrap_or_else(|_| Err(io::Error::other("a part's upload panicked")));
                // The writer may be gone (it failed): nobody waits for this part then.
                let _ = tell.send((index, sent, body));
            })
            .map_err(|e| io::Error::other(format!("cannot start a part upload's thread: {e}")))?;
        self.in_flight += 1;
        self.sent += 1;
        Ok(())
    }

    /// Waits for every part in flight; the outcomes of all the parts sent, in order, or the
    /// first failure.
    pub fn all_done(&mut self) -> io::Result<Vec<&T>> {
        while self.in_flight > 0 {
            self.collect_one()?;
        }
        Ok(self
            .done
            .iter()
            .map(|part| part.as_ref().expect("every part sent has ended"))
            .collect())
    }

    /// Waits for every part in flight, whatever their outcome (the object is being given up).
    pub fn settle(&mut self) {
        while self.in_flight > 0 {
            if self.ended.recv().is_err() {
                return;
            }
            self.in_flight -= 1;
        }
    }

    /// Waits for the next part to end; its failure is the object's.
    fn collect_one(&mut self) -> io::Result<()> {
        let (index, outcome, mut buffer) = self
            .ended
            .recv()
            .map_err(|_| io::Error::other("a part upload's thread is gone"))?;
        self.in_flight -= 1;
        buffer.clear();
        self.spare.push(buffer);
        let part = outcome?;
        if self.done.len() <= index {
            self.done.resize_with(index + 1, || None);
        }
        self.done[index] = Some(part);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{Arc, Barrier};

    /// Parts run together up to the limit (a barrier only `limit` parts can pass together), end
    /// in any order, and come back in the order sent; a failed part fails the object.
    #[test]
    fn parts_run_together_up_to_the_limit_and_come_back_in_order() {
        let limit = 3;
        let mut parts = PartsInFlight::new(limit);
        let together = Arc::new(Barrier::new(limit));
        let running = Arc::new(AtomicUsize::new(0));
        let peak = Arc::new(AtomicUsize::new(0));
        for i in 0..9u8 {
            let mut body = parts.buffer(4);
            body.push(i);
            let (together, running, peak) = (together.clone(), running.clone(), peak.clone());
            parts
                .send(body, move |index, bytes| {
                    let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                    peak.fetch_max(now, Ordering::SeqCst);
                    // Every group of `limit` parts meets here: none can end before the others
                    // of its group started, so `limit` run at once.
                    together.wait();
                    running.fetch_sub(1, Ordering::SeqCst);
                    Ok((index, bytes[0]))
                })
                .unwrap();
        }
        let done: Vec<(usize, u8)> = parts.all_done().unwrap().into_iter().copied().collect();
        assert_eq!(done, (0..9).map(|i| (i, i as u8)).collect::<Vec<_>>());
        assert_eq!(peak.load(Ordering::SeqCst), limit);
        // The buffers came back and were used again: the one filling and those in flight.
        let buffers = parts.spare.len();
        assert!((1..=limit + 1).contains(&buffers), "{buffers} buffers");

        let mut failing = PartsInFlight::new(2);
        failing.send(vec![1], |_, _| Ok(())).unwrap();
        failing
            .send(vec![2], |_, _| Err(io::Error::other("part 2 refused")))
            .unwrap();
        let error = failing.all_done().unwrap_err();
        assert!(error.to_string().contains("part 2 refused"), "{error}");
    }
}
