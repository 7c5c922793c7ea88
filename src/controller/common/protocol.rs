//! The failure protocol both executors run (see the module docs of `controller::common`):
//! apply a decision's actions in order and, when one fails, ask the decision what KubeVirt does
//! next. [`ActionRun`] is that loop's state; each executor supplies how to apply one action and
//! how to answer a failure.

use super::error::ApiFailure;

/// What happened when a list of actions was applied.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Applied {
    /// One line per attempted action: its description, with `(failed: <error>)` when it failed
    /// (what the reconcile record lists).
    pub lines: Vec<String>,
    /// The failure that ended the list early, with the index of its action.
    pub stopped_at: Option<(usize, ApiFailure)>,
}

/// What the decision answers to a failed action.
pub(crate) enum AfterFailure<A> {
    /// Continue after the failed index with this (re-decided) action list; its prefix up to the
    /// failed index is the one already applied.
    Continue(Vec<A>),
    /// Stop applying (KubeVirt returned from the step).
    Stop,
}

/// The loop of the protocol, driven by the executor (an `async` executor cannot hand its API
/// calls to a generic loop without giving up `Send`):
///
/// ```text
/// let mut run = ActionRun::new(actions);
/// while let Some((i, action)) = run.next() {
///     match apply(action).await {
///         Ok(_) => run.succeeded(describe(action)),
///         Err(e) => run.failed(describe(action), e, |i, e| /* Continue(re-decided) or Stop */),
///     }
/// }
/// let applied = run.finish();
/// ```
#[derive(Debug, Clone)]
pub(crate) struct ActionRun<A> {
    actions: Vec<A>,
    index: usize,
    applied: Applied,
}

impl<A> ActionRun<A> {
    /// Start with the decision's actions.
    pub(crate) fn new(actions: Vec<A>) -> Self {
        ActionRun {
            actions,
            index: 0,
            applied: Applied::default(),
        }
    }

    /// The next action to apply and its index, or `None` when the run is over. Borrowed, not
    /// copied: an action may carry a whole VMI or pod.
    pub(crate) fn next(&self) -> Option<(usize, &A)> {
        if self.applied.stopped_at.is_some() {
            return None;
        }
        self.actions.get(self.index).map(|a| (self.index, a))
    }

    /// The current action succeeded.
    pub(crate) fn succeeded(&mut self, description: String) {
        self.applied.lines.push(description);
        self.index += 1;
    }

    /// The current action failed with `error`: `on_failure(index, &error)` says what comes next.
    pub(crate) fn failed(
        &mut self,
        description: String,
        error: ApiFailure,
        on_failure: impl FnOnce(usize, &ApiFailure) -> AfterFailure<A>,
    ) {
        self.applied
            .lines
            .push(format!("{description} (failed: {})", error.message));
        match on_failure(self.index, &error) {
            AfterFailure::Continue(next) => {
                self.actions = next;
                self.index += 1;
            }
            AfterFailure::Stop => self.applied.stopped_at = Some((self.index, error)),
        }
    }

    /// What was applied.
    pub(crate) fn finish(self) -> Applied {
        self.applied
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run<F>(
        actions: Vec<&'static str>,
        fail: &[usize],
        mut on_failure: F,
    ) -> (Applied, Vec<String>)
    where
        F: FnMut(usize, &ApiFailure) -> AfterFailure<&'static str>,
    {
        let mut seen = Vec::new();
        let mut run = ActionRun::new(actions);
        while let Some((i, a)) = run.next() {
            seen.push(format!("{i}:{a}"));
            if fail.contains(&i) {
                run.failed(a.to_string(), ApiFailure::other("boom"), &mut on_failure);
            } else {
                run.succeeded(a.to_string());
            }
        }
        (run.finish(), seen)
    }

    #[test]
    fn continue_with_the_redecided_list_after_the_failed_index() {
        let (applied, seen) = run(vec!["a", "b", "c"], &[1], |i, e| {
            assert_eq!((i, e.message.as_str()), (1, "boom"));
            AfterFailure::Continue(vec!["a", "b", "undo-b", "event"])
        });
        assert_eq!(seen, ["0:a", "1:b", "2:undo-b", "3:event"]);
        assert_eq!(applied.lines, ["a", "b (failed: boom)", "undo-b", "event"]);
        assert_eq!(applied.stopped_at, None);
    }

    #[test]
    fn stop_reports_the_failure_and_skips_the_rest() {
        let (applied, seen) = run(vec!["a", "b", "c"], &[1], |_, _| AfterFailure::Stop);
        assert_eq!(seen, ["0:a", "1:b"]);
        assert_eq!(applied.lines, ["a", "b (failed: boom)"]);
        assert_eq!(applied.stopped_at, Some((1, ApiFailure::other("boom"))));
    }
}
