# Operator experience (issue #6): the memory plan, the progress line, metrics and plots.
# plan_numbers: every byte of mtrun --plan against a hand computation (test-small -np 3 on the
#   cpu backend, 7b -np 5 on cuda: host bytes by rank and kind, GPU bytes by kind).
# plan_refuse: a job that does not fit is refused with its numbers and a change that fits.
# progress_tty: a live line on a pty, plain lines in a log, metrics.jsonl parses.
# plot_png: tools/mt-plot renders a PNG of a short run; clear errors without a run.
# plan_disk_probe: the probe of storage.dir's disk writes a bounded share of its free space, into
#   a file with no name, and the plan says when it could not measure.
foreach(t plan_numbers plan_refuse progress_tty)
  add_test(NAME ops_${t} COMMAND sh ${MT_TEST_DIR}/${t}.sh ${MTRUN} ${CMAKE_SOURCE_DIR})
endforeach()
add_test(NAME ops_plot_png COMMAND sh ${MT_TEST_DIR}/plot_png.sh ${CMAKE_BINARY_DIR}/bin/mt-plot
         ${MTRUN} ${CMAKE_SOURCE_DIR})
add_test(NAME ops_plan_disk_probe COMMAND bash ${MT_TEST_DIR}/plan_disk_probe.sh ${MTRUN}
         ${CMAKE_SOURCE_DIR})
set_tests_properties(ops_plan_numbers ops_plan_refuse ops_progress_tty ops_plot_png
                     ops_plan_disk_probe PROPERTIES
                     TIMEOUT 180 LABELS ops SKIP_RETURN_CODE 77)
# It reads the progress line as a terminal would, with its redraws timed: alone.
set_tests_properties(ops_progress_tty PROPERTIES RUN_SERIAL TRUE)
