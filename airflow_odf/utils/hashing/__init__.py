"""ODF data hashing that both the core and the engine use: the logical hash (arrow-digest), the physical
hash of a file's bytes and the multihash text form they are written in. The engine hashes the files it
wrote with this code on the executors; the core hashes with it on the coordinator."""
