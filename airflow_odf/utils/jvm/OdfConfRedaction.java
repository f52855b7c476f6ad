/*
 * The Spark Connect server's conf answers, redacted: a client's `spark.conf.get` (and getAll, getOption)
 * is answered from the session's conf unredacted by Spark, and that conf holds every server option, the
 * server's own token (`spark.connect.authenticate.token`) among them. This gRPC interceptor
 * (`spark.connect.grpc.interceptor.classes`) replaces each value whose key or value matches Spark's
 * `spark.redaction.regex` by Spark's own redaction text, as `SET` does.
 */
package airflow_odf.guard;

import java.util.regex.Pattern;

import org.apache.spark.SparkEnv;
import org.apache.spark.connect.proto.ConfigResponse;
import org.apache.spark.connect.proto.KeyValue;
import org.sparkproject.connect.grpc.ForwardingServerCall;
import org.sparkproject.connect.grpc.Metadata;
import org.sparkproject.connect.grpc.ServerCall;
import org.sparkproject.connect.grpc.ServerCallHandler;
import org.sparkproject.connect.grpc.ServerInterceptor;

public final class OdfConfRedaction implements ServerInterceptor {
    static final String REDACTED = "*********(redacted)";

    private final Pattern pattern;

    public OdfConfRedaction() {
        SparkEnv env = SparkEnv.get();
        String regex = OdfSqlGuard.DEFAULT_REDACTION_REGEX;
        if (env != null) {
            regex = env.conf().get(OdfSqlGuard.REDACTION_REGEX, regex);
        }
        this.pattern = Pattern.compile(regex);
    }

    @Override
    public <Q, R> ServerCall.Listener<Q> interceptCall(
            ServerCall<Q, R> call, Metadata headers, ServerCallHandler<Q, R> next) {
        return next.startCall(new ForwardingServerCall.SimpleForwardingServerCall<Q, R>(call) {
            @Override
            @SuppressWarnings("unchecked")
            public void sendMessage(R message) {
                super.sendMessage(message instanceof ConfigResponse ? (R) redacted((ConfigResponse) message) : message);
            }
        }, headers);
    }

    ConfigResponse redacted(ConfigResponse response) {
        ConfigResponse.Builder builder = response.toBuilder();
        for (int i = 0; i < builder.getPairsCount(); i++) {
            KeyValue pair = builder.getPairs(i);
            if (pair.hasValue() && (pattern.matcher(pair.getKey()).find() || pattern.matcher(pair.getValue()).find())) {
                builder.setPairs(i, pair.toBuilder().setValue(REDACTED).build());
            }
        }
        return builder.build();
    }
}
