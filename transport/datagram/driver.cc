// placeholder: filled by the datagram driver
