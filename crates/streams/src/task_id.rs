//! Task ids: a task is one sub-topology applied to one partition number of
//! its input topics. Kafka prints them `<subtopology>_<partition>` (e.g.
//! `0_3`), and names each task's state folder after it.

use std::fmt;
use std::str::FromStr;

use crate::error::StreamsError;

/// One task: sub-topology `subtopology` over partition `partition` of every
/// source topic of that sub-topology.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TaskId {
    /// The sub-topology's number, in the order `Topology::describe` lists them.
    pub subtopology: u32,
    /// The input partition number.
    pub partition: i32,
}

impl TaskId {
    /// The task of `subtopology` over `partition`.
    pub fn new(subtopology: u32, partition: i32) -> Self {
        Self {
            subtopology,
            partition,
        }
    }
}

impl fmt::Display for TaskId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}_{}", self.subtopology, self.partition)
    }
}

impl FromStr for TaskId {
    type Err = StreamsError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad =
            || StreamsError::Config(format!("task id {s:?} is not <subtopology>_<partition>"));
        let (a, b) = s.split_once('_').ok_or_else(bad)?;
        Ok(Self::new(
            a.parse().map_err(|_| bad())?,
            b.parse().map_err(|_| bad())?,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prints_and_parses_as_kafka() {
        let t = TaskId::new(1, 12);
        assert_eq!(t.to_string(), "1_12");
        assert_eq!("1_12".parse::<TaskId>().unwrap_or(TaskId::new(9, 9)), t);
        assert!("x_1".parse::<TaskId>().is_err());
        assert!("12".parse::<TaskId>().is_err());
    }
}
