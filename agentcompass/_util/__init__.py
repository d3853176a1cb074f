"""The utilities: small helpers every part of agentcompass uses. Private: not an API;
names here may change in any release."""
