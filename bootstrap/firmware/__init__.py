"""Day-2 firmware: what each node needs (:mod:`.plan`), and the rolling update itself (:mod:`.apply`)."""
