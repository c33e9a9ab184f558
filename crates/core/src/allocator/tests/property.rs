use super::MIB;
