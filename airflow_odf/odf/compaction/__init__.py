"""Hard compaction of a dataset, as the reference defines it: consecutive small slices merged into files
of a bounded size, the chain rebuilt from its Seed (`plan`, `execute`), the records checked unchanged
(`records`). See docs/compaction.md."""
