/*
 * The second wall of an ODF engine session, inside the JVM: a Spark check rule that refuses what an ODF
 * engine never does itself, whichever way the SQL arrived (a manifest's query, `odf sql`, a Spark
 * Connect client that bypasses the provider's Python policy).
 *
 * Spark loads it through `spark.sql.extensions` (a class with a no-argument constructor, applied to each
 * new session's extensions) and runs the rule on every analyzed plan, before anything executes. The
 * engine's own work (DataFrame reads, Parquet writes, temporary views) passes: none of it contains what
 * is refused here. Built by scripts/jvm-guard-jar against the installed pyspark's jars;
 * airflow_odf/utils/jvm_guard.py finds the jar and adds it to a session's conf.
 */
package airflow_odf.guard;

import java.util.Map;
import java.util.Set;

import org.apache.spark.QueryContext;
import org.apache.spark.SparkEnv;
import org.apache.spark.sql.AnalysisException;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.SparkSessionExtensions;
import org.apache.spark.sql.catalyst.expressions.CallMethodViaReflection;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.SubqueryExpression;
import org.apache.spark.sql.catalyst.plans.QueryPlan;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.execution.command.SetCommand;
import scala.Function1;
import scala.Option;
import scala.Tuple2;
import scala.collection.Iterator;
import scala.runtime.AbstractFunction1;
import scala.runtime.BoxedUnit;

public final class OdfSqlGuard extends AbstractFunction1<SparkSessionExtensions, BoxedUnit> {
    static final String PREFIX = "ODF_SQL_GUARD: ";

    /* Settings an ODF session keeps (a value Spark does not have by default: Spark's default after it).
     * With either of the first two on, a query reads files or the environment; with the third off, a
     * Connect client's conf.set may change spark.redaction.regex, which SET's answers are redacted by. */
    static final String[][] LOCKED = {
        {"spark.sql.runSQLOnFiles", "false", "true"},
        {"spark.sql.variable.substitute", "false", "true"},
        {"spark.sql.legacy.setCommandRejectsSparkCoreConfs", "true", "true"},
    };
    static final String REDACTION_REGEX = "spark.redaction.regex";
    /* Spark's default for spark.redaction.regex. */
    static final String DEFAULT_REDACTION_REGEX = "(?i)secret|password|token|access[.]?key";

    /* Settings no SET may change: the locked ones, and those that decide what SET and conf reads redact. */
    static final Set<String> UNSETTABLE = Set.of(
            "spark.sql.runSQLOnFiles",
            "spark.sql.variable.substitute",
            "spark.sql.legacy.setCommandRejectsSparkCoreConfs",
            REDACTION_REGEX,
            "spark.sql.redaction.string.regex",
            "spark.sql.redaction.options.regex");

    /* Plan nodes (by class name, so that Hive's need not be on the class path) and what they do. */
    static final Map<String, String> REFUSED_NODES = Map.ofEntries(
            Map.entry("ScriptTransformation", "script transformation (SELECT TRANSFORM ... USING)"),
            Map.entry("InsertIntoDir", "INSERT OVERWRITE DIRECTORY"),
            Map.entry("InsertIntoDataSourceDirCommand", "INSERT OVERWRITE DIRECTORY"),
            Map.entry("InsertIntoHiveDirCommand", "INSERT OVERWRITE DIRECTORY"),
            Map.entry("AddJarsCommand", "ADD JAR"),
            Map.entry("AddFilesCommand", "ADD FILE"),
            Map.entry("AddArchivesCommand", "ADD ARCHIVE"),
            Map.entry("CreateFunction", "CREATE FUNCTION"),
            Map.entry("CreateFunctionCommand", "CREATE FUNCTION"),
            Map.entry("CreateTempViewUsing", "a view over a path (CREATE VIEW ... USING)"),
            Map.entry("CreateTable", "CREATE TABLE"),
            Map.entry("CreateTableAsSelect", "CREATE TABLE"),
            Map.entry("ReplaceTable", "CREATE TABLE"),
            Map.entry("ReplaceTableAsSelect", "CREATE TABLE"),
            Map.entry("CreateDataSourceTableCommand", "CREATE TABLE"),
            Map.entry("CreateDataSourceTableAsSelectCommand", "CREATE TABLE"),
            Map.entry("CreateTableCommand", "CREATE TABLE"),
            Map.entry("CreateTableLikeCommand", "CREATE TABLE"),
            Map.entry("LoadDataCommand", "LOAD DATA"));

    /* Expressions (by class name) that reach outside the rows: the worker's file paths, the account the
     * engine runs as. Spark resolves a bare `user` or `session_user` that is no column of the input to
     * CurrentUser, which a parser cannot tell from a column; the analyzed plan can. */
    static final Map<String, String> REFUSED_EXPRESSIONS = Map.ofEntries(
            Map.entry("CurrentUser", "the engine's account (current_user, user, session_user)"),
            Map.entry("InputFileName", "the worker's file paths (input_file_name)"),
            Map.entry("InputFileBlockStart", "the worker's file layout (input_file_block_start)"),
            Map.entry("InputFileBlockLength", "the worker's file layout (input_file_block_length)"));

    @Override
    public BoxedUnit apply(SparkSessionExtensions extensions) {
        extensions.injectCheckRule(new AbstractFunction1<SparkSession, Function1<LogicalPlan, BoxedUnit>>() {
            @Override
            public Function1<LogicalPlan, BoxedUnit> apply(SparkSession session) {
                return new CheckRule(session);
            }
        });
        return BoxedUnit.UNIT;
    }

    /* One session's rule: its settings first (a Connect client may have changed them with conf.set,
     * which no plan shows), then every node and expression of the plan, subqueries included. */
    static final class CheckRule extends AbstractFunction1<LogicalPlan, BoxedUnit> {
        private final SparkSession session;

        CheckRule(SparkSession session) {
            this.session = session;
        }

        @Override
        public BoxedUnit apply(LogicalPlan plan) {
            for (String[] locked : LOCKED) {
                if (!locked[1].equalsIgnoreCase(session.conf().get(locked[0], locked[2]).trim())) {
                    throw refused(locked[0] + " was changed; an ODF engine session keeps it " + locked[1]);
                }
            }
            String started = SparkEnv.get().conf().get(REDACTION_REGEX, DEFAULT_REDACTION_REGEX);
            if (!started.equals(session.conf().get(REDACTION_REGEX, DEFAULT_REDACTION_REGEX))) {
                throw refused(REDACTION_REGEX + " was changed; an ODF engine session keeps the one it started with");
            }
            visit(plan);
            return BoxedUnit.UNIT;
        }

        private void visit(QueryPlan<?> plan) {
            String what = REFUSED_NODES.get(plan.getClass().getSimpleName());
            if (what != null) {
                throw refused(what + " is refused in an ODF engine session");
            }
            if (plan instanceof SetCommand) {
                checkSet((SetCommand) plan);
            }
            for (Iterator<Expression> it = plan.expressions().iterator(); it.hasNext(); ) {
                visit(it.next());
            }
            for (Iterator<?> it = plan.children().iterator(); it.hasNext(); ) {
                visit((QueryPlan<?>) it.next());
            }
            for (Iterator<?> it = plan.innerChildren().iterator(); it.hasNext(); ) {
                Object inner = it.next();
                if (inner instanceof QueryPlan) {
                    visit((QueryPlan<?>) inner);
                }
            }
        }

        private void visit(Expression expression) {
            if (expression instanceof CallMethodViaReflection) {
                throw refused("reflection (reflect, java_method, try_reflect) is refused in an ODF engine session");
            }
            String what = REFUSED_EXPRESSIONS.get(expression.getClass().getSimpleName());
            if (what != null) {
                throw refused(what + " is refused in an ODF engine session");
            }
            if (expression instanceof SubqueryExpression) {
                visit(((SubqueryExpression) expression).plan());
            }
            for (Iterator<Expression> it = expression.children().iterator(); it.hasNext(); ) {
                visit(it.next());
            }
        }

        private static void checkSet(SetCommand set) {
            Option<Tuple2<String, Option<String>>> kv = set.kv();
            if (kv.isDefined() && kv.get()._2().isDefined() && UNSETTABLE.contains(kv.get()._1().trim())) {
                throw refused("SET " + kv.get()._1().trim() + " is refused in an ODF engine session");
            }
        }
    }

    /* An AnalysisException (what Spark's own checks raise, so clients report its one line), thrown
     * from methods that cannot declare it: Java checks it, Scala's callers do not. */
    static RuntimeException refused(String message) {
        return OdfSqlGuard.<RuntimeException>thrown(new AnalysisException(
                PREFIX + message,
                Option.empty(),
                Option.empty(),
                Option.empty(),
                Option.empty(),
                scala.collection.immutable.Map$.MODULE$.empty(),
                new QueryContext[0]));
    }

    @SuppressWarnings("unchecked")
    private static <T extends Throwable> RuntimeException thrown(Throwable error) throws T {
        throw (T) error;
    }
}
