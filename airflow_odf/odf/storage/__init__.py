"""Object stores a dataset lives in: the protocol (with compare-and-swap), the local disk, S3, HTTP
(read-only), and the repository URLs that name them."""
