echo done > background1
