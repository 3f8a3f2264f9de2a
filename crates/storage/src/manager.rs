//! placeholder
#[derive(Debug)]
pub struct LogManager;
#[derive(Debug)]
pub struct ManagerConfig;
