echo ready > background0
