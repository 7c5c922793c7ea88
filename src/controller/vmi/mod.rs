//! The VirtualMachineInstance controller (being written by another helper).
