#!/usr/bin/env bash
# Local Spark services from the pip pyspark, bound to 127.0.0.1.
#   infra/spark-local.sh cluster-start   # standalone master spark://127.0.0.1:7077 + one worker
#   infra/spark-local.sh connect-start   # Spark Connect server sc://127.0.0.1:15002
#   infra/spark-local.sh stop            # stop everything this script started
# Then: wmbt backtest SPEC --master spark://127.0.0.1:7077   (or --master sc://127.0.0.1:15002)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
case "$PY" in /*) ;; *) PY="$PWD/$PY" ;; esac
SPARK_HOME=$("$PY" -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))')
# Python workers (Connect's foreachBatch runner, executors) use the project's environment:
# the system python3 has no pandas, and the worker then never connects back
export SPARK_HOME SPARK_LOCAL_IP=127.0.0.1 PYSPARK_PYTHON=${PYSPARK_PYTHON:-$PY}
RUN=${WMBT_SPARK_RUN:-$PWD/.spark-local}
mkdir -p "$RUN"
start() {  # name, command...
  local name=$1; shift
  if [ -f "$RUN/$name.pid" ] && kill -0 "$(cat "$RUN/$name.pid")" 2>/dev/null; then
    echo "$name already running (pid $(cat "$RUN/$name.pid"))"; return
  fi
  setsid "$@" >"$RUN/$name.log" 2>&1 < /dev/null &
  echo $! > "$RUN/$name.pid"
  echo "$name started (pid $!, log $RUN/$name.log)"
}
wait_port() {
  for _ in $(seq 60); do (echo > "/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0; sleep 1; done
  echo "port $1 did not open" >&2; return 1
}
case "${1:-}" in
  cluster-start)
    start master "$SPARK_HOME/bin/spark-class" org.apache.spark.deploy.master.Master \
      --host 127.0.0.1 --port 7077 --webui-port 8080
    wait_port 7077
    start worker "$SPARK_HOME/bin/spark-class" org.apache.spark.deploy.worker.Worker \
      spark://127.0.0.1:7077 --host 127.0.0.1 --cores "${WORKER_CORES:-2}" \
      --memory "${WORKER_MEMORY:-4g}" --webui-port 8081
    echo "master: spark://127.0.0.1:7077" ;;
  connect-start)
    start connect "$SPARK_HOME/bin/spark-submit" \
      --class org.apache.spark.sql.connect.service.SparkConnectServer \
      --master "${CONNECT_MASTER:-local[2]}" \
      --conf spark.connect.grpc.binding.address=127.0.0.1 \
      --conf spark.connect.grpc.binding.port=15002 \
      --conf spark.sql.shuffle.partitions=2 --conf spark.sql.session.timeZone=UTC \
      --conf spark.ui.enabled=false spark-internal
    wait_port 15002
    echo "Spark Connect: sc://127.0.0.1:15002" ;;
  stop)
    for name in connect worker master; do
      if [ -f "$RUN/$name.pid" ]; then
        pid=$(cat "$RUN/$name.pid")
        kill -- -"$pid" 2>/dev/null || kill "$pid" 2>/dev/null || true
        rm -f "$RUN/$name.pid"; echo "$name stopped"
      fi
    done ;;
  *) sed -n '2,6p' "$0"; exit 2 ;;
esac
