// Placeholder: implementation pending.
