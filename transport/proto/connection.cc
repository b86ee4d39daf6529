// placeholder: filled by the protocol implementation
