"""The broker's rules, once: what is dispatched (CQ units, tagsCode, index keys, the DELAY stop), the
valid end and recovery walk, truncation, the ConsumeQueue layout and IndexFile image."""
