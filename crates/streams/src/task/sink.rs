//! The sink node's processor: serializes and hands records to the outbox.

use crate::error::Result;
use crate::processor::{ProcessorContext, RawProcessor, RawRecord};
use crate::task::OutputRecord;
use crate::topology::RawSerializer;

pub(crate) struct SinkProcessor {
    pub topic: String,
    pub serializer: RawSerializer,
}

impl RawProcessor for SinkProcessor {
    fn init(&mut self, _ctx: &mut ProcessorContext<'_>) -> Result<()> {
        Ok(())
    }
    fn process(&mut self, ctx: &mut ProcessorContext<'_>, record: RawRecord) -> Result<()> {
        let (key, value) = (self.serializer)(&self.topic, &record.key, &record.value)?;
        ctx.core.outbox.push(OutputRecord {
            topic: self.topic.clone(),
            partition: None,
            key,
            value,
            timestamp: record.timestamp,
            headers: record.headers,
        });
        Ok(())
    }
    fn close(&mut self) -> Result<()> {
        Ok(())
    }
}
