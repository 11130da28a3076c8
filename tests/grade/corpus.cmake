# The grader's corpus: one line per mistake, the score it must get and what the learner must read.
labkit_grade_corpus(ring_allreduce ring_all_reduce null_pointer_on_rank_1 SCORE 0.0
  SAYS "crashed \\(SIGSEGV\\) in ring_all_reduce, P=2, count=1, on rank 1")
labkit_grade_corpus(ring_allreduce ring_all_reduce endless_loop_on_rank_1 SCORE 0.0
  SAYS "did not finish within the time limit, in ring_all_reduce, P=2, count=1" "rank 1 never came back to the simulator")
labkit_grade_corpus(ring_allreduce ring_all_reduce calls_native_all_reduce SCORE 0.0
  SAYS "calls comm.all_reduce: that is a native collective")
labkit_grade_corpus(ring_allreduce ring_all_reduce sends_left SCORE 0.0
  SAYS "sent to rank 3; a ring sends only to its right neighbour" "earns nothing")
labkit_grade_corpus(ring_allreduce ring_all_reduce all_gather_chunk_off_by_one SCORE 0.0
  SAYS "all-gather step 0: sent chunk")
labkit_grade_corpus(ring_allreduce ring_all_reduce ignores_the_remainder SCORE 10.0 ALSO hierarchical_all_reduce
  SAYS "fails where the count does not divide by P" "hierarchical_all_reduce +2/2 +10.0/10")
labkit_grade_corpus(ring_allreduce ring_all_reduce hangs_before_main SCORE 10.0 ALSO hierarchical_all_reduce
  SAYS "did not list its tests within --timeout 2 s: code that runs before main" "hierarchical_all_reduce +2/2 +10.0/10")
labkit_grade_corpus(ring_allreduce ring_all_reduce blocking_sends_deadlock SCORE 0.0
  SAYS "P=2, count=1: deadlock: every live rank is blocked" "Hint: a blocking send returns only once")
labkit_grade_corpus(ring_allreduce ring_all_reduce vector_at_out_of_range SCORE 0.0
  SAYS "P=2, count=1: rank 0: an exception escaped: vector::_M_range_check")
labkit_grade_corpus(collectives naive_all_reduce reduce_then_broadcast SCORE 0.0
  SAYS "calls comm.reduce: that is a native collective")
labkit_grade_corpus(collectives naive_all_reduce overwrites_instead_of_folding SCORE 5.0
  SAYS "expected 3000, got 2000")
labkit_grade_corpus(collectives binomial_tree_broadcast assumes_root_0 SCORE 0.0
  SAYS "fails where the root is not rank 0")
labkit_grade_corpus(collectives binomial_tree_broadcast nearest_child_first SCORE 0.0
  SAYS "send to the farthest child first" "earns nothing")
labkit_grade_corpus(collectives ring_all_gather forwards_the_wrong_block SCORE 0.0
  SAYS "step 0: sent block")
# A loop that keeps calling the simulator is reported from inside it, not as a rank that never came back.
labkit_grade_corpus(collectives ring_all_gather never_advances SCORE 0.0
  SAYS "did not finish within the time limit" "keeps calling the simulator without end")
labkit_grade_corpus(collectives pairwise_all_to_all xor_partners SCORE 0.0
  SAYS "the ones that are not powers of two" "to=3 is out of range for 3 ranks" "Hint: a peer is a rank from 0 to P-1")
labkit_grade_corpus(ring_allreduce recursive_halving_doubling_all_reduce no_fold_for_odd_ranks SCORE 5.0
  SAYS "the ones that are not powers of two")
labkit_grade_corpus(memory model_state_bytes forgets_the_master_copy SCORE 3.3
  SAYS "master weights \\(fp32 copy\\): expected 4 bytes, got 0")
labkit_grade_corpus(memory kv_cache_bytes endless_recursion SCORE 0.0
  SAYS "crashed \\(SIGSEGV\\) in kv_cache_bytes, LLaMA-2 70B")
labkit_grade_corpus(memory activation_bytes_per_layer integer_division_by_zero SCORE 0.0
  SAYS "crashed \\(SIGFPE\\) in activation_bytes_per_layer, GPT-3 layer, s 2048, b 1")
labkit_grade_corpus(ddp average_gradients sums_without_dividing SCORE 3.3
  SAYS "fails at P = 2, 3, 4, 5, 8; passes at P = 1" "expected the mean 1500, got 3000 \\(the sum: divide by P\\)" "P times too large")
labkit_grade_corpus(ddp assign_buckets closes_past_the_cap SCORE 5.0
  SAYS "a bucket that reaches its cap exactly is full")
labkit_grade_corpus(ddp launch_ready_buckets starts_any_ready_bucket SCORE 0.0
  SAYS "bucket 1 is ready but bucket 0 is not" "earns nothing")
labkit_grade_corpus(ddp launch_ready_buckets waits_for_every_bucket SCORE 0.0
  SAYS "once backward had ended")
labkit_grade_corpus(fsdp unshard gathers_into_the_unpadded_run SCORE 3.3
  SAYS "fails where the count does not divide by P")
labkit_grade_corpus(fsdp zero_step sums_instead_of_averaging SCORE 0.0
  SAYS "fails at P = 2, 3, 4, 8; passes at P = 1" "P=2, count=7: rank 0, element 0: expected -250, got -1500")
labkit_grade_corpus(fsdp gather_compute_free keeps_the_unit SCORE 5.0
  SAYS "rank 0 still holds 28 bytes gathered after gather_compute_free returned, 28 too many")
labkit_grade_corpus(fsdp gather_compute_free never_computes SCORE 0.0
  SAYS "gather_compute_free: called compute\\(\\) 0 times for block 0")
# Only t = 1 passes, where nothing is communicated: no "(the even ones)" from that one contrast.
labkit_grade_corpus(tp column_parallel_linear forgets_the_input_gradient_sum SCORE 0.0
  SAYS "t=2: rank 0's input gradient: off the dense layer's" "fails at P = 2, 4; passes at P = 1\\.")
labkit_grade_corpus(tp row_parallel_linear bias_on_every_rank SCORE 0.0
  SAYS "t=2: rank 0's output: off the dense layer's" "is the bias added on one rank only")
labkit_grade_corpus(tp sequence_parallel_collectives gathers_without_reordering SCORE 3.3
  SAYS "t=2, B=3, T=4, C=1: rank 0: sequence 0, position 2, channel 0: expected")
labkit_grade_corpus(tp merge_attention log_of_sum_of_exps SCORE 5.0
  SAYS "lse = inf: a log-sum-exp taken as log")
labkit_grade_corpus(pipeline one_f_one_b_schedule warms_up_p_forwards SCORE 6.7
  SAYS "P=2, M=3: stage 0 holds 3 micro-batches at once; 1F1B's is min\\(P - s, M\\) = 2" "2/3 +6.7/10")
# Its grade test trains ten pipelines: 2 s is too short on a slow machine.
labkit_grade_corpus(pipeline pipeline_exchange sends_its_own_input_on SCORE 0.0 TIMEOUT 10
  SAYS "weights at offset .* are .* from one rank's"
       "stage 0 \\(layers \\[0, 1\\)\\) sent stream\\(-1\\); send_activation sends")
labkit_grade_corpus(moe top_k_routing gates_from_scores SCORE 6.7
  SAYS "E=2, k=2, biased: token 0, choice 0: gate .*, expected .*the bias picks, the probabilities weigh" "2/3 +6.7/10")
labkit_grade_corpus(moe combine_with_gates forgets_the_gates SCORE 0.0
  SAYS "k=2, C=1: token 1, channel 0: got 13, expected 6.66667 \\(the sum of its kept outputs times their gates"
       "the layer gives .* weighted by their gates")
# The wrap past P - 1 leaves a rank waiting on one that returned: not the hint for two ranks that both send first;
# the pattern test fails at P = 5 and 6 for their rank count, not for the count 1024 they do not divide.
labkit_grade_corpus(collectives binomial_tree_broadcast sends_past_the_last_rank SCORE 0.0
  SAYS "fails at P = 3, 5, 6, 7, 9 \\(the ones that are not powers of two\\); passes at P = 1, 2, 4, 8"
       "fails at P = 5, 6, 7 \\(the ones that are not powers of two\\); passes at P = 8"
       "Hint: a rank returned while another still waits for its message")
labkit_grade_corpus(ring_allreduce ring_all_reduce deletes_its_buffer_twice SCORE 0.0
  SAYS "crashed \\(SIGABRT\\) in ring_all_reduce, P=2, count=1(, on rank .)?: memory was corrupted"
       "double free" "AddressSanitizer stops at the bad write")
labkit_grade_corpus(ring_allreduce ring_all_reduce receives_into_an_empty_vector SCORE 0.0
  SAYS "rank 1: recv\\(from=0\\): the receive buffer is a null pointer with a count of 1 \\(f32\\)")
labkit_grade_corpus(ring_allreduce ring_all_reduce reduces_into_an_empty_vector SCORE 0.0
  SAYS "reduce_local: inout is a null pointer \\(a view with no data, such as an empty std::vector's\\) while in holds")
labkit_grade_corpus(pipeline pipeline_exchange receives_into_its_output SCORE 0.0 TIMEOUT 10
  SAYS "stage 1 \\(layers \\[1, 2\\)\\) received into stream\\(1\\); receive_activation fills the stage's input")
labkit_grade_corpus(ring_allreduce ring_all_reduce all_gather_receives_the_chunk_it_sends SCORE 0.0
  SAYS "P=2, count=1: rank 0: recv\\(from=1, tag=0\\): the message is 4 bytes but the receive buffer holds 0 bytes"
       "Hint: a receive takes the first message from its peer with its tag")
