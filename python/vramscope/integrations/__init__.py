"""Trainer callbacks that record one training step with :func:`vramscope.record`:
``vramscope.integrations.transformers.MemoryCallback`` (Hugging Face ``Trainer``) and
``vramscope.integrations.lightning.MemoryCallback`` (Lightning). Each imports its framework
only when used, so the package depends on neither."""
