"""Protocol adapters: each turns its protocol's requests into core calls and the core's
outcomes and effects into its protocol's frames (STYLE §2). The core imports none of them."""
