// placeholder: filled by the FEC implementation
