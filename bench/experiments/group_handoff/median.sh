# median: the median of the numbers on standard input (separated by spaces or newlines); sourced
# by run.sh, one_statement.sh, ab_patch.sh, paired.sh and paired_builds.sh.
median() { tr ' ' '\n' | grep . | sort -n | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }
