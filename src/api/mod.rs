//! kubevirt.io types (being written).
