"""Dataset Sharing: sync of blocks and objects between stores (Simple Transfer Protocol, every item
verified on arrival), push and pull with remotes, and `odf serve`."""
