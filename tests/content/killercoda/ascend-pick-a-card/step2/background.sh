# the cards of this node (an 8-card Atlas 800I A2 in the room; emulated here)
seq 0 7 > cards.txt
