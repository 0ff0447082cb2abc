"""HTTP routes: one router per area. Handlers parse, call a service function, render."""
