UPDATE plans SET is_default = false WHERE is_default
