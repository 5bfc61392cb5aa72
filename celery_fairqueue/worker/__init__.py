"""The worker side: a consumer bootstep that claims fair jobs for free pool slots."""
