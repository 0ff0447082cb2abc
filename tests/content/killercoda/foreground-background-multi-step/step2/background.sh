echo done > background2
